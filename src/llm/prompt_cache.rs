//! Recent prompts' KV states, kept in RAM so that an alarm that repeats
//! after others came in between still reads only what is new to it: the
//! states within their byte budget (`PromptCache`), and how a slot restores
//! the best one before reading a prompt and keeps its own after a job.

use std::collections::VecDeque;

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::token::LlamaToken;

use super::context::SlotState;
use super::lookup;

/// Restoring a saved state copies megabytes; a gain of a few tokens is read
/// faster than that.
const MIN_RESTORE_GAIN: usize = 32;

/// A finished job's prompt and the KV state that holds it.
pub(super) struct SavedPrompt {
    pub(super) tokens: Vec<LlamaToken>,
    pub(super) state: Vec<u8>,
}

/// Saved prompt states, oldest first, at most `limit` bytes of them.
pub(super) struct PromptCache {
    saved: VecDeque<SavedPrompt>,
    bytes: usize,
    limit: usize,
}

impl PromptCache {
    /// A cache of at most `limit` bytes of states (0: none is kept).
    pub(super) fn new(limit: usize) -> Self {
        Self {
            saved: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// The byte budget: a state larger than this is not kept.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    pub(super) fn clear(&mut self) {
        self.saved.clear();
        self.bytes = 0;
    }

    /// The saved state sharing the most with `prompt`, when it shares
    /// clearly more than the `current` tokens the cache holds of it.
    pub(super) fn best(&self, prompt: &[LlamaToken], current: usize) -> Option<&SavedPrompt> {
        let saved: Vec<&[LlamaToken]> = self.saved.iter().map(|s| s.tokens.as_slice()).collect();
        let (i, _) = lookup::best_saved(prompt, &saved, current, MIN_RESTORE_GAIN)?;
        self.saved.get(i)
    }

    /// Keeps `state` for `tokens` as the newest, in place of an older state
    /// of the same tokens, dropping the oldest ones until the budget holds
    /// it. The caller keeps states over the budget out (`limit`).
    pub(super) fn insert(&mut self, tokens: Vec<LlamaToken>, state: Vec<u8>) {
        let size = state.len();
        if let Some(i) = self.saved.iter().position(|s| s.tokens == tokens) {
            if let Some(old) = self.saved.remove(i) {
                self.bytes -= old.state.len();
            }
        }
        while self.bytes + size > self.limit {
            match self.saved.pop_front() {
                Some(old) => self.bytes -= old.state.len(),
                None => break,
            }
        }
        self.bytes += size;
        self.saved.push_back(SavedPrompt { tokens, state });
    }
}

impl SlotState<'_> {
    /// Restores the saved prompt state sharing the most with `prompt`, when
    /// it shares clearly more than the cache holds now.
    pub(super) fn resume_saved(&mut self, prompt: &[LlamaToken]) {
        let current = lookup::common_prefix(&self.kv, prompt);
        let Some(entry) = self.prompts.best(prompt, current) else {
            return;
        };
        self.ctx.clear_kv_cache();
        self.kv.clear();
        // SAFETY: the bytes are what `state_seq_get_data_ext` of this very
        // context wrote (same model, build and shape).
        let ok = unsafe {
            self.ctx
                .state_seq_set_data_ext(&entry.state, 0, LlamaStateSeqFlags::empty())
        };
        if ok {
            self.kv = entry.tokens.clone();
        } else {
            self.ctx.clear_kv_cache();
            tracing::warn!("saved prompt state did not restore; reading the prompt");
        }
    }

    /// Saves the state of the last answer's prompt (`unsaved`), if any. The
    /// slot thread calls it once the answer is sent: copying the state out
    /// takes ~120 ms with the 1.5B stand-in here, which an alarm's answer
    /// need not wait for. A job that comes first saves it before it starts.
    pub(super) fn save_unsaved(&mut self) {
        if let Some(n) = self.unsaved.take() {
            self.save_prompt(n);
        }
    }

    /// Keeps this job's prompt state for later alarms that share it. The
    /// generated tokens are dropped first: no later prompt contains them.
    fn save_prompt(&mut self, prompt_len: usize) {
        if !self.prompts.enabled() || prompt_len == 0 || self.truncate(prompt_len).is_err() {
            return;
        }
        if self.kv.len() != prompt_len {
            return;
        }
        let Ok(Some(state)) = self.read_state(self.prompts.limit()) else {
            return;
        };
        self.prompts.insert(self.kv.clone(), state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().map(|&t| LlamaToken(t)).collect()
    }

    fn prompt(first: i32, len: i32) -> Vec<LlamaToken> {
        toks(&(first..first + len).collect::<Vec<_>>())
    }

    #[test]
    fn the_oldest_states_make_room_for_a_new_one() {
        let mut c = PromptCache::new(10);
        c.insert(prompt(0, 40), vec![0; 4]);
        c.insert(prompt(100, 40), vec![0; 4]);
        c.insert(prompt(200, 40), vec![0; 4]);
        assert!(c.best(&prompt(0, 40), 0).is_none(), "the oldest stayed");
        assert!(c.best(&prompt(100, 40), 0).is_some());
        assert!(c.best(&prompt(200, 40), 0).is_some());
        assert_eq!(c.bytes, 8);
    }

    #[test]
    fn a_prompt_saved_again_replaces_its_state() {
        let mut c = PromptCache::new(100);
        c.insert(prompt(0, 40), vec![1; 4]);
        c.insert(prompt(0, 40), vec![2; 6]);
        assert_eq!(c.saved.len(), 1);
        assert_eq!(c.bytes, 6);
        assert_eq!(c.best(&prompt(0, 40), 0).map(|s| s.state[0]), Some(2));
    }

    #[test]
    fn a_state_is_restored_only_for_a_clear_gain() {
        let mut c = PromptCache::new(100);
        c.insert(prompt(0, 40), vec![0; 4]);
        // The cache already holds 20 of the 40 shared tokens: 20 is no gain.
        assert!(c.best(&prompt(0, 40), 20).is_none());
        assert!(c.best(&prompt(0, 40), 0).is_some());
        c.clear();
        assert!(c.best(&prompt(0, 40), 0).is_none());
        assert_eq!(c.bytes, 0);
    }
}
