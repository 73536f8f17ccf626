//! Prompt-lookup drafts for speculative decoding, and the prompt cache's
//! choice of which saved state to resume from. Pure token arithmetic.
//!
//! A diagnosis copies the manuals heavily (cause phrases, checks, part
//! names), so the tokens that followed the last occurrence of what was just
//! generated, in the passages or in the output so far, are a good guess at
//! what comes next. The slot verifies a guess in one batched decode: on a CPU
//! that costs little more than one step, because the weights are read once.

use std::ops::Range;

pub use crate::config::Lookup;

/// Where in `history` a draft continues: the tokens that followed the most
/// recent earlier occurrence of the longest suffix of `history` that is
/// between `ngram_min` and `ngram_max` tokens long, at most `draft_max` of
/// them. Empty when nothing matches.
pub fn draft<T: PartialEq>(history: &[T], spec: &Lookup) -> Range<usize> {
    let len = history.len();
    if spec.draft_max == 0 || spec.ngram_min == 0 {
        return 0..0;
    }
    for n in (spec.ngram_min..=spec.ngram_max).rev() {
        if len <= n {
            continue;
        }
        let suffix = &history[len - n..];
        // The occurrence must end before the suffix starts, so that something
        // follows it; the most recent one is the likeliest to continue alike.
        for start in (0..len - n).rev() {
            if history[start..start + n] == *suffix {
                let from = start + n;
                return from..(from + spec.draft_max).min(len);
            }
        }
    }
    0..0
}

/// How many rows to decode for a verification of `rows` rows (the sampled
/// token and its drafts), given `cost[k-1]`, the measured time of a k-row
/// decode: the cheapest count from `rows` up to the table's end, the smaller
/// on a near-tie. More rows than needed can be cheaper: llama.cpp's repacked
/// CPU kernels multiply four rows at once and each leftover row alone, so on
/// x86 a 4-row batch costs less than a 3-row one. The extra rows are filler
/// whose logits nobody reads.
pub fn padded_rows(rows: usize, cost: &[f64]) -> usize {
    let Some(&base) = cost.get(rows.wrapping_sub(1)) else {
        return rows;
    };
    let mut best = (rows, base);
    for (i, &c) in cost.iter().enumerate().skip(rows) {
        // 5%: a measured difference smaller than that is noise, and a wider
        // batch holds more of the cache for a moment.
        if c < best.1 * 0.95 {
            best = (i + 1, c);
        }
    }
    best.0
}

/// How many leading tokens `a` and `b` share.
pub fn common_prefix<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Which saved prompt (index into `saved`) to resume from for `prompt`,
/// given that the context already shares `current` tokens with it: the one
/// sharing the most, if it shares at least `min_gain` more than the context.
/// Restoring a state copies megabytes, so a few tokens are not worth it.
pub fn best_saved<T: PartialEq>(
    prompt: &[T],
    saved: &[&[T]],
    current: usize,
    min_gain: usize,
) -> Option<(usize, usize)> {
    saved
        .iter()
        .enumerate()
        .map(|(i, s)| (i, common_prefix(s, prompt)))
        .filter(|(_, n)| *n >= current + min_gain)
        .max_by_key(|(i, n)| (*n, *i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_padded_only_where_a_wider_batch_is_measurably_cheaper() {
        // Tile of four: 1-3 rows one pass each, 4 rows one tiled pass.
        let tiled = [1.0, 2.0, 3.0, 1.4, 2.4, 3.4, 4.4, 2.8];
        assert_eq!(padded_rows(1, &tiled), 1);
        assert_eq!(padded_rows(2, &tiled), 4);
        assert_eq!(padded_rows(3, &tiled), 4);
        assert_eq!(padded_rows(4, &tiled), 4);
        assert_eq!(padded_rows(5, &tiled), 5);
        assert_eq!(padded_rows(6, &tiled), 8);
        // Cost growing with every row (no tiles): never padded.
        let linear = [1.0, 1.25, 1.5, 1.75, 2.0];
        for r in 1..=5 {
            assert_eq!(padded_rows(r, &linear), r);
        }
        // A 2% dip is noise.
        assert_eq!(padded_rows(2, &[1.0, 1.5, 1.47]), 2);
        // Beyond the table, or no table: as asked.
        assert_eq!(padded_rows(9, &tiled), 9);
        assert_eq!(padded_rows(3, &[]), 3);
        assert_eq!(padded_rows(0, &tiled), 0);
    }

    const SPEC: Lookup = Lookup {
        draft_max: 3,
        ngram_min: 1,
        ngram_max: 3,
    };

    #[test]
    fn the_tokens_after_the_last_match_of_the_longest_suffix_are_drafted() {
        // "... lube oil filter clogged ... lube oil" -> "filter clogged ..."
        let h = [9, 1, 2, 3, 4, 5, 8, 1, 2];
        let r = draft(&h, &SPEC);
        assert_eq!(&h[r], &[3, 4, 5]);
    }

    #[test]
    fn a_longer_match_wins_over_a_more_recent_shorter_one() {
        let h = [1, 2, 7, 8, 2, 6, 1, 2];
        // Suffix [1, 2] occurs at 0 (then 7), [2] alone most recently at 4 (then 6).
        assert_eq!(&h[draft(&h, &SPEC)], &[7, 8, 2]);
    }

    #[test]
    fn the_most_recent_occurrence_is_preferred() {
        let h = [1, 5, 1, 6, 1];
        assert_eq!(&h[draft(&h, &SPEC)], &[6, 1]);
    }

    #[test]
    fn drafts_are_capped_and_may_be_empty() {
        let h = [1, 2, 3, 4, 5, 6, 1];
        let short = Lookup {
            draft_max: 2,
            ..SPEC
        };
        assert_eq!(&h[draft(&h, &short)], &[2, 3]);
        assert!(draft(&[1, 2, 3], &SPEC).is_empty());
        assert!(draft::<u8>(&[], &SPEC).is_empty());
        let bigram = Lookup {
            ngram_min: 2,
            ..SPEC
        };
        assert!(
            draft(&[1, 2, 3, 2], &bigram).is_empty(),
            "unigram matches are off"
        );
        let off = Lookup {
            draft_max: 0,
            ..SPEC
        };
        assert!(draft(&h, &off).is_empty());
    }

    #[test]
    fn random_histories_never_draft_out_of_bounds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..5_000 {
            let n = rng.gen_range(0..40);
            let h: Vec<u8> = (0..n).map(|_| rng.gen_range(0..4)).collect();
            let spec = Lookup {
                draft_max: rng.gen_range(0..9),
                ngram_min: rng.gen_range(1..4),
                ngram_max: rng.gen_range(1..6),
            };
            let r = draft(&h, &spec);
            assert!(r.end <= h.len() && r.len() <= spec.draft_max);
        }
    }

    #[test]
    fn the_saved_prompt_sharing_most_is_resumed_if_it_gains_enough() {
        let p = [1, 2, 3, 4, 5, 6];
        let a = [1, 2, 9];
        let b = [1, 2, 3, 4, 5, 7];
        let saved: Vec<&[i32]> = vec![&a, &b];
        assert_eq!(best_saved(&p, &saved, 2, 2), Some((1, 5)));
        assert_eq!(best_saved(&p, &saved, 4, 2), None, "gain of 1 < 2");
        assert_eq!(best_saved::<i32>(&p, &[], 0, 1), None);
    }
}
