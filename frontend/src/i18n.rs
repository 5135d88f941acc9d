//! English and Chinese UI strings (spec §4.6). The language is detected from localStorage
//! (`devui:i18n-lang`), then the browser, falling back to English; the switcher persists it.

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

/// Looks up a key; unknown keys come back as themselves so a missing string is visible.
pub fn t(lang: Lang, key: &'static str) -> &'static str {
    let (en, zh) = match key {
        "app.title" => ("SimTree DevUI", "SimTree 开发界面"),
        "nav.home" => ("Home", "首页"),
        "nav.tree" => ("Tree", "树"),
        "nav.sim" => ("Simulation", "模拟"),
        "nav.studio" => ("Studio", "工作台"),
        "nav.language" => ("Language", "语言"),
        "home.sim" => ("Simulation", "模拟"),
        "home.simDesc" => (
            "View the events and agent context of one node.",
            "查看单个节点的事件与智能体上下文。",
        ),
        "home.tree" => ("SimTree", "模拟树"),
        "home.treeDesc" => (
            "Create, run and branch timelines on a graph.",
            "在图上创建、运行并分支时间线。",
        ),
        "home.studio" => ("Studio", "工作台"),
        "home.studioDesc" => (
            "Tree and ops, events, agents side by side.",
            "树与操作、事件、智能体并排显示。",
        ),
        "common.none" => ("None", "无"),
        "common.noOptions" => ("No options", "没有选项"),
        "common.empty" => ("(empty)", "（空）"),
        "common.noEvents" => ("(no events yet)", "（暂无事件）"),
        "common.stickBottom" => ("Stick to bottom", "自动滚动到底部"),
        "common.selected" => ("Selected", "已选"),
        "common.nodes" => ("Nodes", "节点"),
        "common.edges" => ("Edges", "边"),
        "common.running" => ("Running", "运行中"),
        "common.apply" => ("Apply", "应用"),
        "common.delete" => ("Delete", "删除"),
        "common.refresh" => ("Refresh", "刷新"),
        "common.create" => ("Create", "创建"),
        "common.viewDetails" => ("View details", "查看详情"),
        "sim.title" => ("Simulation", "模拟"),
        "sim.events" => ("Events", "事件"),
        "sim.agent" => ("Agent", "智能体"),
        "simtree.title" => ("SimTree", "模拟树"),
        "simtree.graph" => ("Graph", "图"),
        "simtree.tree" => ("Tree", "树"),
        "simtree.createNew" => ("Create new simulation tree", "创建新的模拟树"),
        "simtree.runLeaves" => ("Run leaves", "运行叶子节点"),
        "simtree.stepCount" => ("Step Count", "步数"),
        "simtree.parallelSize" => ("Parallel Size", "并行数量"),
        "simtree.chainLength" => ("Chain Length", "链长度"),
        "simtree.broadcast" => ("Broadcast", "广播"),
        "simtree.deleteSubtree" => ("Delete subtree", "删除子树"),
        "simtree.run" => ("Run", "运行"),
        "simtree.parallelRun" => ("Parallel Run", "并行运行"),
        "simtree.chainRun" => ("Chain Run", "链式运行"),
        "simtree.branch" => ("Branch", "分支"),
        "simtree.opKind" => ("Operation", "操作"),
        "simtree.fit" => ("Fit", "适应"),
        "simtree.compare" => ("Compare", "比较"),
        "simtree.compareWith" => ("Compare selected with node", "将所选节点与此节点比较"),
        "simtree.divergence" => ("First divergence", "首个分歧"),
        "simtree.lca" => ("Common ancestor", "最近公共祖先"),
        "simtree.noDivergence" => ("No divergence: the same events", "无分歧：事件相同"),
        "studio.title" => ("Studio", "工作台"),
        "studio.selectTree" => ("Select simulation tree", "选择模拟树"),
        "studio.createNew" => ("Create new", "新建"),
        "studio.events" => ("Events", "事件"),
        "studio.agents" => ("Agents", "智能体"),
        "toasts.nodeStarted" => ("Node {{id}} started", "节点 {{id}} 已开始"),
        "toasts.nodeFinished" => ("Node {{id}} finished", "节点 {{id}} 已完成"),
        _ => (key, key),
    };
    match lang {
        Lang::En => en,
        Lang::Zh => zh,
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
        assert_eq!(toast(Lang::En, "toasts.nodeStarted", 7), "Node 7 started");
        assert_eq!(Lang::Zh.html_lang(), "zh-CN");
    }
}
