//! The trade's words for what the manuals name otherwise: a plant writes
//! `ME`, `T/C`, `副机` and `desludging` where a manual's section names its
//! alarm `main engine`, `turbocharger`, `柴油发电机` and `sludge discharge`.
//! `expand` adds the manuals' words to a message for each of the trade's
//! forms it holds, so that a section's name for its alarm can be found in
//! a message written in the plant's own words (`named`).
//!
//! The table is the trade's general usage (the manuals' vocabulary, marine
//! engineering practice, the ocean-data QC standards' test names), never
//! one plant's phrasing of one alarm. It is only read against the sections of the alarm's own
//! equipment, so a form with another meaning elsewhere (`DO`, diesel oil
//! or dissolved oxygen) is left out rather than guessed.

/// Forms written in capitals match only as written (`ME`, not `me`);
/// others match in any case. Each matches whole words only.
const EN: &[(&[&str], &str)] = &[
    (&["ME", "M/E", "M.E."], "main engine"),
    (
        &[
            "DG",
            "D/G",
            "GE",
            "G/E",
            "AE",
            "A/E",
            "genset",
            "gen set",
            "aux engine",
        ],
        "diesel generator",
    ),
    (&["FO", "F.O.", "HFO"], "fuel oil"),
    (&["lub oil", "lub", "lubricating oil", "L.O."], "lube oil"),
    (
        &["JCW", "JW", "HT FW", "HTFW", "HT water", "HT cooling"],
        "jacket water",
    ),
    (&["T/C", "TC", "turbo"], "turbocharger"),
    (&["OWS"], "oily water separator"),
    (&["OCM", "oil content monitor"], "oil content meter"),
    (
        &["FWG", "evaporator", "freshwater generator"],
        "fresh water generator",
    ),
    (&["BWTS", "BWMS"], "ballast water treatment system"),
    (&["AHU"], "air handling unit"),
    (&["A/C", "HVAC", "aircon"], "air conditioning"),
    (&["SG", "S/G", "STRG"], "steering gear"),
    (&["MSB", "main SWBD"], "main switchboard"),
    (&["SWBD", "SWB"], "switchboard"),
    (&["IR", "megger"], "insulation resistance"),
    (
        &["EF", "E/F", "ground fault", "earth leakage"],
        "earth fault",
    ),
    (&["OMD"], "oil mist detector"),
    // `DP` is left as written: the manuals' short forms hold it, and
    // `pressure` would name every pressure section.
    (&["diff press", "delta P", "delta-P"], "differential"),
    (&["PSU"], "power supply"),
    (&["PV"], "solar"),
    (
        &["MPPT", "solar regulator", "charge regulator"],
        "charge controller",
    ),
    (&["RH"], "humidity"),
    (&["WDT"], "watchdog"),
    (&["SBD", "Iridium", "Inmarsat", "VSAT"], "satellite"),
    (&["GPS", "BeiDou"], "gnss"),
    (&["LTE", "cellular", "modem"], "4g"),
    (&["separator"], "purifier"),
    (
        &[
            "desludge",
            "desludging",
            "ejection",
            "sludge shot",
            "bowl opening",
        ],
        "sludge discharge",
    ),
    (&["lockout", "locked out", "tripped", "trp"], "trip"),
    (
        &["flameout", "flame loss", "flame lost", "no flame signal"],
        "flame failure",
    ),
    (
        &[
            "not start",
            "no start",
            "won't start",
            "fail to start",
            "failed start",
            "start fail",
        ],
        "start failure",
    ),
    (
        &["fail", "failed", "faulty", "malfunction", "error"],
        "failure fault",
    ),
    (
        &["overheat", "overheating", "overtemp", "over temperature"],
        "overtemperature temperature high",
    ),
    (&["overpressure", "over pressure"], "pressure high"),
    (&["seized", "jammed", "frozen", "stalled"], "stuck"),
    // Quality-control tests' names (QARTOD, NDBC) for what a reading did.
    (&["flat line", "flatline", "repeated values"], "stuck flat"),
    (&["gross range"], "out of range"),
    (&["black out", "blacked out"], "blackout"),
    (
        &[
            "comms",
            "comm",
            "communication",
            "timeout",
            "timed out",
            "offline",
            "not responding",
            "no response",
        ],
        "communication lost offline no data",
    ),
    (
        &["reboot", "rebooted", "restart", "restarted", "reset"],
        "restart reboot reset",
    ),
];

/// Chinese forms match wherever they are written.
const ZH: &[(&[&str], &str)] = &[
    (&["副机", "辅机", "发电机组", "发电机"], "柴油发电机"),
    (
        &["缸套水", "高温水", "高温淡水", "缸套冷却水"],
        "缸套冷却水，高温淡水",
    ),
    (&["涡轮增压器", "透平", "增压机"], "增压器"),
    (&["分离机", "净油机", "分油机"], "分油机"),
    (&["淡水发生器", "制淡装置", "造水机"], "造水机"),
    (&["操舵装置", "舵机"], "舵机"),
    (&["主配电盘", "主配电屏", "主配"], "主配电板"),
    (&["燃油锅炉", "锅炉"], "辅锅炉"),
    (&["空调", "空气处理单元", "空调机组"], "空调器"),
    (&["润滑油", "机油"], "滑油"),
    (&["重油", "轻油", "柴油"], "燃油"),
    (&["断电", "停电", "跳电", "黑船"], "失电"),
    (&["脱扣", "跳机", "停机", "跳开"], "跳闸"),
    (&["火焰消失", "灭火", "点不着"], "熄火"),
    (&["失效", "失灵", "不工作", "坏了", "异常"], "故障，失败"),
    (&["过热", "超温", "温度过高", "发烫"], "温度高，过热"),
    (&["通讯", "通信", "超时", "离线", "掉线"], "通信中断，离线"),
    (&["重新启动", "复位", "重启"], "重启，复位"),
    (&["卡死", "卡住", "不动"], "卡死，卡住"),
    (&["电池"], "蓄电池"),
    (&["太阳能板", "太阳能电池板", "光伏板"], "太阳能，光伏"),
    (&["拉力", "张力"], "张力"),
    (&["溶氧"], "溶解氧"),
    (&["系泊", "锚泊"], "锚系"),
];

/// `text` with the manuals' words after it, each once, for every trade
/// form it holds; unchanged when it holds none.
pub fn expand(text: &str) -> String {
    let spaced = |s: &str| {
        let mut out = String::from(" ");
        out.extend(
            s.chars()
                .map(|c| match c.is_alphanumeric() || "/.'".contains(c) {
                    true => c,
                    false => ' ',
                }),
        );
        out.push(' ');
        // A full stop ends a sentence as often as it shortens a word.
        out.replace(". ", " . ").replace("  ", " ")
    };
    let exact = spaced(text);
    let lower = exact.to_lowercase();
    let holds = |form: &str| {
        let caps = form.chars().any(|c| c.is_ascii_uppercase())
            && !form.chars().any(|c| c.is_ascii_lowercase());
        match caps {
            true => exact.contains(&format!(" {form} ")),
            false => lower.contains(&format!(" {} ", form.to_lowercase())),
        }
    };
    let mut added: Vec<&str> = Vec::new();
    for (forms, words) in EN {
        if forms.iter().any(|f| holds(f)) && !added.contains(words) {
            added.push(words);
        }
    }
    for (forms, words) in ZH {
        if forms.iter().any(|f| text.contains(f)) && !added.contains(words) {
            added.push(words);
        }
    }
    if added.is_empty() {
        return text.to_string();
    }
    format!("{text}，{}", added.join("，"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trades_short_forms_add_the_manuals_words() {
        let e = expand("No.2 D/G LO press low");
        assert!(e.contains("diesel generator"), "{e}");
        let e = expand("ME did not start on air from ECR");
        assert!(
            e.contains("main engine") && e.contains("start failure"),
            "{e}"
        );
        let e = expand("2号副机滑油压力低");
        assert!(e.contains("柴油发电机"), "{e}");
    }

    /// A QC test's name says what the reading did, in other words than the
    /// manuals' alarms (`Wind sensor stuck (… flat …)`, `pH out of range`).
    #[test]
    fn quality_control_tests_and_the_trades_blackout_add_the_manuals_words() {
        let e = expand("flat_line_test: consecutively repeated values");
        assert!(e.contains("stuck flat"), "{e}");
        let e = expand("gross_range_test failed");
        assert!(e.contains("out of range"), "{e}");
        let e = expand("both engines tripped off and there was black out");
        assert!(e.contains("blackout"), "{e}");
        // Whole words only: a line that is flat is no flat line.
        assert!(!expand("line flat").contains("stuck flat"));
    }

    #[test]
    fn capitals_match_only_as_written_and_whole() {
        // `me` is a word, `ME` the main engine; `TCX` is no `TC`.
        assert_eq!(expand("call me"), "call me");
        assert!(!expand("RESET-TCX").contains("turbocharger"));
    }
}
