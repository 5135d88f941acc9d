//! English and Chinese UI strings (spec §4.6), kept as a table in `i18n.tsv`. The language is
//! detected from localStorage (`devui:i18n-lang`), then the browser, falling back to English; the
//! switcher persists it.

use std::collections::HashMap;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    En,
    Zh,
}

impl Lang {
    /// From a stored or browser language tag (`zh`, `zh-CN`, `en-US`, …).
    pub fn from_tag(tag: &str) -> Option<Lang> {
        let t = tag.to_ascii_lowercase();
        if t.starts_with("zh") {
            Some(Lang::Zh)
        } else if t.starts_with("en") {
            Some(Lang::En)
        } else {
            None
        }
    }

    /// The value stored under `devui:i18n-lang`.
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    /// The `<html lang>` attribute.
    pub fn html_lang(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }

    /// The switcher button's label.
    pub fn button(self) -> &'static str {
        match self {
            Lang::En => "EN",
            Lang::Zh => "中文",
        }
    }
}

/// The texts, as `i18n.tsv` holds them: a line a key, `key<TAB>English<TAB>Chinese`.
const TEXTS: &str = include_str!("i18n.tsv");

/// Every key with its English and Chinese text, read from [`TEXTS`] once.
fn texts() -> &'static HashMap<&'static str, (&'static str, &'static str)> {
    static TABLE: OnceLock<HashMap<&'static str, (&'static str, &'static str)>> = OnceLock::new();
    TABLE.get_or_init(|| rows(TEXTS).map(|(key, en, zh)| (key, (en, zh))).collect())
}

/// The table's rows, `(key, English, Chinese)`; comment lines (`#`) and blank lines are skipped,
/// and a line without three fields is left out (a unit test holds the file to its form).
fn rows(table: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    table.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).filter_map(|l| {
        let mut fields = l.split('\t');
        Some((fields.next()?, fields.next()?, fields.next()?))
    })
}

/// Looks up a key; unknown keys come back as themselves so a missing string is visible.
pub fn t(lang: Lang, key: &'static str) -> &'static str {
    let Some(&(en, zh)) = texts().get(key) else {
        return key;
    };
    match lang {
        Lang::En => en,
        Lang::Zh => zh,
    }
}

/// A wire name shown to people — an edge type in the legend, an op kind in the branch editor:
/// itself in English (the name the API and the docs use), its translation in Chinese. Unknown
/// names come back as themselves.
pub fn wire_term(lang: Lang, name: &'static str) -> &'static str {
    if lang == Lang::En {
        return name;
    }
    match name {
        "advance" => "推进",
        "agent_ctx" => "智能体上下文",
        "agent_plan" => "智能体计划",
        "agent_props" => "智能体属性",
        "scene_state" => "场景状态",
        "public_event" => "公共事件",
        "multi" => "多项操作",
        "portfolio" => "持仓",
        "news" => "新闻",
        "agent_swap" => "更换智能体",
        "prompt" => "提示词",
        "global" => "全局变量",
        "environment" => "环境",
        "agents" => "智能体",
        "sweep" => "扫描",
        "explore" => "探索",
        "public_broadcast" => "公共广播",
        "agent_ctx_append" => "追加智能体上下文",
        "agent_plan_replace" => "替换智能体计划",
        "agent_props_patch" => "修改智能体属性",
        "scene_state_patch" => "修改场景状态",
        "scene_prose_set" => "改写场景文本",
        "portfolio_patch" => "修改持仓",
        "case_data_inject" => "注入资料",
        "agent_prompt_replace" => "替换提示词",
        "abm_set_global" => "设置全局变量",
        "abm_set_environment" => "设置环境变量",
        "abm_set_agent" => "设置智能体变量",
        other => other,
    }
}

/// A toast text with its `{{id}}` filled in.
pub fn toast(lang: Lang, key: &'static str, id: u64) -> String {
    t(lang, key).replace("{{id}}", &id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_and_lookup() {
        assert_eq!(Lang::from_tag("zh-CN"), Some(Lang::Zh));
        assert_eq!(Lang::from_tag("en-GB"), Some(Lang::En));
        assert_eq!(Lang::from_tag("fr"), None);
        assert_eq!(t(Lang::Zh, "common.delete"), "删除");
        assert_eq!(t(Lang::En, "nope"), "nope");
        assert_eq!(toast(Lang::En, "toasts.nodeFinished", 7), "Node 7 finished");
        assert_eq!(Lang::Zh.html_lang(), "zh-CN");
    }

    #[test]
    fn the_table_has_three_texts_a_line_and_each_key_once() {
        let mut seen = std::collections::HashSet::new();
        for (n, line) in TEXTS.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            assert!(
                fields.len() == 3 && fields.iter().all(|f| !f.is_empty() && f.trim() == *f),
                "i18n.tsv line {}: want `key<TAB>English<TAB>Chinese`, got {line:?}",
                n + 1
            );
            assert!(seen.insert(fields[0]), "i18n.tsv line {}: {} again", n + 1, fields[0]);
        }
        assert_eq!(seen.len(), texts().len());
        assert!(seen.len() > 400, "read only {} keys", seen.len());
    }

    #[test]
    fn every_edge_type_and_op_kind_has_a_chinese_name() {
        use crate::ops::Kind;
        for kind in [Kind::Social, Kind::Trading, Kind::Abm] {
            let legend = kind.legend().iter().map(|s| s.name);
            let ops = crate::editors::op_kinds(kind).iter().copied().filter(|k| *k != "custom");
            for name in legend.chain(ops) {
                assert_eq!(wire_term(Lang::En, name), name);
                assert!(
                    wire_term(Lang::Zh, name).chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
                    "{name} has no Chinese name"
                );
            }
        }
    }

    #[test]
    fn every_key_the_ui_uses_has_a_chinese_text() {
        // Every `tr("…")`/`t(lang, "…")` key in the UI's sources must resolve, and to Chinese.
        let sources = [
            include_str!("app.rs"),
            include_str!("state.rs"),
            include_str!("pages/abm_details.rs"),
            include_str!("pages/agents.rs"),
            include_str!("pages/common.rs"),
            include_str!("pages/compare_panel.rs"),
            include_str!("pages/create.rs"),
            include_str!("pages/details.rs"),
            include_str!("pages/events.rs"),
            include_str!("pages/home.rs"),
            include_str!("pages/inspector.rs"),
            include_str!("pages/mod.rs"),
            include_str!("pages/ops_panel.rs"),
            include_str!("pages/overlay.rs"),
            include_str!("pages/simtree.rs"),
            include_str!("pages/studio.rs"),
            include_str!("pages/trading_details.rs"),
            include_str!("pages/tree_bar.rs"),
            include_str!("pages/viewer.rs"),
            include_str!("graph/canvas.rs"),
            include_str!("graph/footer.rs"),
            include_str!("graph/keys.rs"),
            include_str!("graph/minimap.rs"),
            include_str!("graph/mod.rs"),
            include_str!("graph/paint.rs"),
            include_str!("graph/state.rs"),
            include_str!("graph/svg.rs"),
            include_str!("graph/toolbar.rs"),
            include_str!("branch.rs"),
            include_str!("data.rs"),
            include_str!("trees.rs"),
            include_str!("sweep_view.rs"),
            include_str!("explore_view.rs"),
            include_str!("job_view.rs"),
            include_str!("estimate.rs"),
            include_str!("pages/new/library.rs"),
            include_str!("pages/new/describe.rs"),
            include_str!("pages/live_text.rs"),
            include_str!("plot.rs"),
            include_str!("pages/new/mod.rs"),
            include_str!("pages/new/social.rs"),
            include_str!("pages/new/trading.rs"),
            include_str!("pages/new/abm.rs"),
            include_str!("pages/new/custom.rs"),
            include_str!("pages/scene_about.rs"),
            include_str!("graph/tags.rs"),
            include_str!("graph/edge_filter.rs"),
            include_str!("pages/notebook/mod.rs"),
            include_str!("pages/notebook/annotate.rs"),
            include_str!("pages/notebook/ask.rs"),
            include_str!("pages/notebook/calls.rs"),
            include_str!("pages/notebook/describe.rs"),
            include_str!("pages/notebook/find.rs"),
            include_str!("pages/notebook/global.rs"),
        ];
        let prefixes: std::collections::BTreeSet<&str> =
            rows(TEXTS).filter_map(|(key, _, _)| key.split_once('.')).map(|(p, _)| p).collect();
        let mut keys = Vec::new();
        for src in sources {
            for part in src.split(".tr(\"").skip(1).chain(src.split("t(lang, \"").skip(1)) {
                if let Some(end) = part.find('"') {
                    keys.push(part[..end].to_string());
                }
            }
            // Fields and panels take their words' keys as arguments: any string that starts with
            // a key's first part and a dot, and is one word after it, is a key.
            for prefix in &prefixes {
                for part in src.split(&format!("\"{prefix}.")).skip(1) {
                    if let Some(end) = part.find('"')
                        && part[..end].chars().all(|c| c.is_ascii_alphanumeric())
                    {
                        keys.push(format!("{prefix}.{}", &part[..end]));
                    }
                }
            }
        }
        assert!(keys.len() > 40, "found only {} keys", keys.len());
        keys.extend(crate::sweep::FORM_ERRORS.iter().map(|k| k.to_string()));
        keys.extend(crate::explore::FORM_ERRORS.iter().map(|k| k.to_string()));
        for key in keys {
            let key: &'static str = Box::leak(key.into_boxed_str());
            let zh = t(Lang::Zh, key);
            assert_ne!(zh, key, "{key} has no text at all");
            assert!(zh.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)), "{key} is not translated: {zh}");
        }
    }
}
