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
        "home.intro" => (
            "A tree is one simulation cloned into a tree of nodes: each node is a live state, reached from its parent by advancing it some turns or by branching it with a change (\"what if?\"). Explore, run and compare the branches.",
            "一棵模拟树是把一个模拟克隆成的节点树：每个节点都是一个可运行的状态，由父节点推进若干回合或施加一个改动（“如果……会怎样？”）分支而来。在这里探索、运行并比较各个分支。",
        ),
        "home.kinds" => ("Three kinds of simulation", "三类模拟"),
        "home.kindSocial" => (
            "Social scene: agents talk and act in a scene (chat, council, werewolf, landlord, village); a turn is one agent's move.",
            "社会场景：智能体在场景中对话与行动（聊天、议会、狼人杀、斗地主、村庄）；一个回合是一个智能体的行动。",
        ),
        "home.kindTrading" => (
            "Trading episode: an agent trades on real daily market data; a turn is one decision.",
            "交易回合：一个智能体在真实的日线行情上交易；一个回合是一次决策。",
        ),
        "home.kindAbm" => (
            "Agent-based model: a Mesa model steps its agents; a turn is one model step.",
            "基于智能体的模型：一个 Mesa 模型推进其智能体；一个回合是模型的一步。",
        ),
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
        "common.loading" => ("Loading…", "加载中…"),
        "agent.role" => ("Role", "角色"),
        "agent.plan" => ("Plan", "计划"),
        "agent.properties" => ("Properties", "属性"),
        "agent.goals" => ("goals", "目标"),
        "agent.milestones" => ("milestones", "里程碑"),
        "agent.strategy" => ("strategy", "策略"),
        "agent.notes" => ("notes", "备注"),
        "chart.enlarge" => ("Enlarge", "放大"),
        "chart.enlargeHint" => (
            "Show the chart across the window (Escape closes it)",
            "在整个窗口中显示图表（按 Esc 关闭）",
        ),
        "chart.close" => ("Close", "关闭"),
        "chart.closeHint" => ("Back to the chart's place (Escape)", "返回图表原位置（Esc）"),
        "chart.empty" => (
            "Nothing to chart yet: advance this node to see its series.",
            "暂无可绘制的数据：推进此节点即可看到其序列。",
        ),
        "common.noAgents" => (
            "No LLM agents: an agent-based model's agents follow its rules (see the steps).",
            "没有 LLM 智能体：基于智能体的模型按其规则运行（见各步）。",
        ),
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
        "sim.pick" => (
            "This page shows one node of a tree, read only. Pick a tree to see its root, or open a node from a tree's page.",
            "此页只读地显示树中的一个节点。选择一棵树查看其根节点，或从树的页面打开某个节点。",
        ),
        "sim.noTrees" => ("There are no trees yet. Make one on the", "还没有任何树。请在此创建："),
        "sim.agent" => ("Agent", "智能体"),
        "simtree.title" => ("SimTree", "模拟树"),
        "simtree.graph" => ("Graph", "图"),
        "simtree.tree" => ("Tree", "树"),
        "simtree.createNew" => ("Create new simulation tree", "创建新的模拟树"),
        "simtree.runLeaves" => ("Run leaves", "运行叶子节点"),
        "simtree.stepCount" => ("Run length", "运行长度"),
        "simtree.parallelSize" => ("Parallel Size", "并行数量"),
        "simtree.chainLength" => ("Chain Length", "链长度"),
        "simtree.broadcast" => ("Broadcast", "广播"),
        "simtree.deleteSubtree" => ("Delete subtree", "删除子树"),
        "simtree.run" => ("Run", "运行"),
        "simtree.parallelRun" => ("Parallel Run", "并行运行"),
        "ops.sameSeed" => ("Same seed for every child", "所有子节点使用相同种子"),
        "ops.sameSeedHint" => (
            "Off: each child of a parallel run gets its own seed. On: every child starts from the parent's random state.",
            "关闭：并行运行的每个子节点使用各自的种子。开启：所有子节点沿用父节点的随机状态。",
        ),
        "estimate.label" => ("Estimated cost", "预计开销"),
        "estimate.text" => (
            "{{calls}} calls · {{tokens}} tokens ({{in}} in, {{out}} out)",
            "{{calls}} 次调用 · {{tokens}} 个令牌（输入 {{in}}，输出 {{out}}）",
        ),
        "estimate.money" => ("about", "约"),
        "notebook.callFailed" => ("No reply: the run failed on this call", "无回复：运行在此调用处失败"),
        "estimate.tokensUnknown" => (
            "{{calls}} calls · tokens unknown until the tree has a recorded call",
            "{{calls}} 次调用 · 令牌数未知（树中尚无已记录的调用）",
        ),
        "simtree.chainRun" => ("Chain Run", "链式运行"),
        "simtree.branch" => ("Branch", "分支"),
        "simtree.opKind" => ("Operation", "操作"),
        "simtree.fit" => ("Fit", "适应"),
        "graph.zoomIn" => ("Zoom in (+)", "放大 (+)"),
        "graph.zoomOut" => ("Zoom out (−)", "缩小 (−)"),
        "graph.fit" => ("Fit the whole tree (f)", "适应整棵树 (f)"),
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
        "toasts.nodeFinished" => ("Node {{id}} finished", "节点 {{id}} 已完成"),
        "toasts.runsFinished" => ("{{n}} runs finished ({{ids}})", "{{n}} 个运行已完成（{{ids}}）"),
        "toasts.nodeFailed" => ("Node {{id}} failed: {{reason}}", "节点 {{id}} 失败：{{reason}}"),
        "toasts.cancelled" => ("Stopped: {{ids}}", "已停止：{{ids}}"),
        "common.cancel" => ("Cancel", "取消"),
        "common.close" => ("Close", "关闭"),
        "graph.search" => ("Find node: id or op text", "查找节点：编号或操作文字"),
        "graph.noMatch" => ("no match", "无匹配"),
        "graph.direction" => ("Top-down / left-to-right layout", "自上而下 / 从左到右布局"),
        "graph.keys" => ("Keyboard", "键盘快捷键"),
        "graph.canvas" => (
            "Tree graph: find, click or walk with the arrow keys to pick a node",
            "树图：查找、点击或用方向键选择节点",
        ),
        "graph.fan" => (
            "sweep cell #{{id}} · {{n}} replicates",
            "扫描单元 #{{id}} · {{n}} 个重复",
        ),
        "keys.fit" => ("fit the whole tree", "适应整棵树"),
        "keys.parentChild" => ("parent / first child", "父节点 / 第一个子节点"),
        "keys.siblings" => ("previous / next sibling", "上一个 / 下一个兄弟节点"),
        "keys.advance" => ("advance the selected node", "推进所选节点"),
        "keys.branch" => ("go to the branch editor", "转到分支编辑器"),
        "keys.delete" => ("delete the subtree (asks first)", "删除子树（先确认）"),
        "keys.collapse" => ("collapse / expand the subtree", "折叠 / 展开子树"),
        "keys.search" => ("find a node", "查找节点"),
        "keys.zoom" => ("zoom in / out", "放大 / 缩小"),
        "keys.help" => ("this help", "本帮助"),
        "offline.title" => ("The server is not reachable.", "无法连接服务器。"),
        "offline.body" => (
            "Is `simtree serve` running? The page reconnects by itself when it is back.",
            "`simtree serve` 是否在运行？服务器恢复后页面会自动重连。",
        ),
        "notFound.title" => ("Tree not found", "未找到模拟树"),
        "notFound.body" => (
            "It may have been deleted, or the server restarted. Create a new tree or open another one.",
            "它可能已被删除，或服务器已重启。请新建一棵树或打开另一棵。",
        ),
        "notFound.node" => ("Node {{id}} does not exist in this tree.", "此树中不存在节点 {{id}}。"),
        "notFound.showingRoot" => ("Showing its root instead.", "改为显示其根节点。"),
        "tree.dataset" => ("data", "数据"),
        "conn.live" => ("live", "已连接"),
        "conn.connecting" => ("connecting…", "连接中…"),
        "conn.lost" => ("reconnecting…", "重新连接中…"),
        "tree.label" => ("Tree", "树"),
        "tree.openDocument" => ("Open this tree's document", "打开此树的文档"),
        "tree.none" => ("No tree open", "未打开模拟树"),
        "theme.toggle" => ("Theme: system, dark, light", "主题：跟随系统、深色、浅色"),
        "create.scenario" => ("Scenario", "场景"),
        "create.seed" => ("Seed", "随机种子"),
        "create.budget" => ("Token budget", "令牌预算"),
        "inspector.none" => ("Select a node to see what made it.", "选择一个节点以查看其来历。"),
        "inspector.node" => ("Node", "节点"),
        "inspector.decisions" => ("decision points", "决策点"),
        "inspector.starts" => ("first decision", "首个决策"),
        "inspector.equity" => ("equity", "净值"),
        "inspector.step" => ("step", "步"),
        "inspector.scene" => ("scene", "场景"),
        "node.root" => ("root", "根节点"),
        "op.turn" => ("turn", "回合"),
        "op.turns" => ("turns", "回合"),
        "op.decision" => ("decision", "决策"),
        "op.decisions" => ("decisions", "决策"),
        "op.ranOf" => ("+{{ran}} of {{asked}} {{unit}}", "+{{ran}}/{{asked}} {{unit}}"),
        "op.step" => ("step", "步"),
        "op.steps" => ("steps", "步"),
        "op.plan" => ("plan", "计划"),
        "op.cleared" => ("cleared", "已清空"),
        "op.scene" => ("scene", "场景"),
        "op.broadcast" => ("broadcast", "广播"),
        "op.cash" => ("cash", "现金"),
        "op.agent" => ("agent", "智能体"),
        "op.prompt" => ("prompt", "提示词"),
        "op.prose" => ("prose", "场景文本"),
        "op.copy" => ("copy", "副本"),
        "status.done" => ("done", "完成"),
        "status.running" => ("running", "运行中"),
        "status.failed" => ("failed", "失败"),
        "status.cancelled" => ("cancelled", "已取消"),
        "status.interrupted" => ("interrupted", "已中断"),
        "trading.strategy" => ("strategy", "策略"),
        "trading.buyHold" => ("buy & hold", "买入持有"),
        "trading.totalReturn" => ("total return (time-weighted)", "总收益（时间加权）"),
        "trading.annualised" => ("annualised", "年化收益"),
        "trading.volatility" => ("volatility", "波动率"),
        "trading.sharpe" => ("Sharpe", "夏普比率"),
        "trading.maxDrawdown" => ("max drawdown", "最大回撤"),
        "trading.tradesRejected" => ("trades / rejected", "成交 / 被拒"),
        "trading.date" => ("date", "日期"),
        "trading.side" => ("side", "方向"),
        "trading.ticker" => ("ticker", "代码"),
        "trading.qty" => ("qty", "数量"),
        "trading.price" => ("price", "价格"),
        "abm.seed" => ("seed", "种子"),
        "abm.terminated" => ("terminated", "已终止"),
        "abm.topology" => ("topology", "拓扑"),
        "abm.globals" => ("globals", "全局变量"),
        "abm.agent" => ("agent", "智能体"),
        "abm.agents" => ("agents", "个智能体"),
        "abm.perAgent" => ("Tracked per agent", "按智能体跟踪的变量"),
        "abm.sum" => ("sum", "合计"),
        "progress.turn" => ("turn", "回合"),
        "live.title" => ("Writing now", "正在生成"),
        "live.hint" => (
            "The model's reply as it streams; the events show it when the turn ends",
            "模型正在流式输出的回复；回合结束后会出现在事件中",
        ),
        "graph.depth" => ("Depth to keep open", "保留展开的深度"),
        "graph.collapseDepth" => ("Collapse below this depth", "折叠到此深度"),
        "graph.expandAll" => ("Expand all", "全部展开"),
        "inspector.retry" => ("Run again from the parent", "从父节点重新运行"),
        "unit.turns" => ("turns", "回合"),
        "unit.decisions" => ("decisions", "决策"),
        "unit.steps" => ("steps", "步"),
        "unit.nodes" => ("nodes", "节点"),
        "unit.runs" => ("runs", "次运行"),
        "progress.step" => ("step", "步"),
        "progress.decision" => ("decision", "决策"),
        "ops.title" => ("Run", "运行"),
        "ops.advance" => ("Advance", "推进"),
        "ops.stop" => ("Stop", "停止"),
        "ops.cannotAdvance" => ("Cannot advance", "无法推进"),
        "confirm.delete" => (
            "Delete node {{id}} and its subtree ({{n}} nodes)?",
            "删除节点 {{id}} 及其子树（共 {{n}} 个节点）？",
        ),
        "branch.custom" => ("custom op (JSON)", "自定义操作（JSON）"),
        "branch.customHelp" => (
            "Any op as JSON, e.g. portfolio_patch, case_data_inject, abm_set_global",
            "任意操作的 JSON，例如 portfolio_patch、case_data_inject、abm_set_global",
        ),
        "branch.jsonHelp" => ("Value (JSON)", "值（JSON）"),
        "branch.planHelp" => (
            "The agent's plan at this node (JSON; a goal may be plain text)",
            "该智能体在此节点的计划（JSON；目标可写为纯文本）",
        ),
        "data.title" => ("Data", "数据"),
        "data.tree" => ("Download tree (JSON)", "下载树（JSON）"),
        "data.log" => ("Node log (JSONL)", "节点日志（JSONL）"),
        "data.series" => ("Series (CSV)", "序列（CSV）"),
        "data.chart" => ("Chart (SVG)", "图表（SVG）"),
        "data.noSeries" => ("A social node has no series to download.", "社交节点没有可下载的序列。"),
        "data.noChart" => ("No chart is drawn for this node.", "该节点没有绘制图表。"),
        "data.notJson" => ("The file is not JSON", "该文件不是 JSON"),
        "data.import" => ("Import an export file", "导入导出文件"),
        "trees.title" => ("Trees on this server", "服务器上的树"),
        "trees.none" => (
            "No trees yet: create one in SimTree or Studio.",
            "还没有树：请在 SimTree 或工作台中创建。",
        ),
        "trees.tree" => ("Tree", "树"),
        "trees.name" => ("Name", "名称"),
        "trees.created" => ("Created", "创建于"),
        "trees.activity" => ("Last activity", "最近活动"),
        "trees.rename" => ("Rename", "重命名"),
        "trees.save" => ("Save", "保存"),
        "kind.social" => ("social", "社会模拟"),
        "kind.trading" => ("trading", "交易"),
        "kind.abm" => ("agent-based", "多智能体模型"),
        "trees.nodes" => ("Nodes", "节点数"),
        "trees.open" => ("Open", "打开"),
        "trees.confirmDelete" => ("Delete tree {{id}} with all its nodes?", "删除树 {{id}} 及其全部节点？"),
        "branch.field" => ("Field", "字段"),
        "branch.now" => ("now", "当前"),
        "branch.newValue" => ("New value", "新值"),
        "branch.moreJson" => ("More keys (JSON object)", "更多键（JSON 对象）"),
        "branch.proseHint" => (
            "What this node's prompts say about the scene. Edit any part: the child's prompts carry your text from its next turn on.",
            "此节点提示词中的场景文本。可编辑任一部分：子节点从下一轮起使用你的文本。",
        ),
        "branch.noFields" => (
            "This model declares nothing to set here.",
            "该模型在此没有可设置的声明。",
        ),
        "branch.agentType" => ("Agent type", "智能体类型"),
        "branch.agentPick" => ("Agent of this node", "本节点的智能体"),
        "branch.allAgents" => ("all agents of the type", "该类型的全部智能体"),
        "branch.agentId" => (
            "Agent id (empty: every agent of the type)",
            "智能体编号（留空：该类型的全部智能体）",
        ),
        "branch.cash" => ("Cash", "现金"),
        "branch.portfolioHelp" => (
            "Empty fields stay as they are; 0 shares sells the position.",
            "留空的字段保持不变；0 股表示清仓。",
        ),
        "branch.content" => ("Content", "内容"),
        "branch.agentKind" => ("Agent", "智能体"),
        "branch.lookback" => ("Lookback (bars)", "回看周期（根）"),
        "branch.band" => ("Band (standard deviations)", "带宽（标准差）"),
        "branch.history" => ("History (decision points kept)", "保留的历史决策点数"),
        "branch.prompt" => ("System prompt", "系统提示词"),
        "compare.bookkeeping" => (
            "Show bookkeeping (context deltas, process starts and ends, action starts)",
            "显示簿记条目（上下文增量、处理开始与结束、动作开始）",
        ),
        "compare.event" => ("event", "事件"),
        "compare.trades" => ("trades", "成交笔数"),
        "compare.rejected" => ("rejected decisions", "被拒决策"),
        "compare.enterId" => ("Enter the id of the node to compare with.", "请输入要比较的节点编号。"),
        "details.title" => ("Node details", "节点详情"),
        "usage.calls" => ("calls", "次调用"),
        "usage.tokens" => ("tokens", "令牌"),
        "usage.budget" => ("budget", "预算"),
        "usage.saved" => ("saved by caching", "缓存节省"),
        "usage.cacheable" => ("of input cacheable", "输入可缓存"),
        "explore.title" => ("Explorations", "探索"),
        "explore.none" => (
            "No explorations yet: start one from the selected node below.",
            "还没有探索：可在下方从所选节点开始一次探索。",
        ),
        "explore.running" => ("running", "运行中"),
        "explore.done" => ("done", "已完成"),
        "explore.cancelled" => ("cancelled", "已取消"),
        "explore.interrupted" => ("interrupted", "已中断"),
        "explore.round" => ("round", "轮次"),
        "explore.runs" => ("runs", "运行次数"),
        "explore.alive" => ("in", "在列"),
        "explore.droppedAfter" => ("out after", "淘汰于第"),
        "explore.best" => ("Best", "最佳"),
        "explore.margin" => ("ahead of the runner-up by", "领先第二名"),
        "explore.openBest" => ("Open the best branch", "打开最佳分支"),
        "explore.candidate" => ("Candidate", "候选"),
        "explore.cancel" => ("Cancel exploration", "取消探索"),
        "explore.new" => ("New exploration from node", "从节点新建探索"),
        "explore.metric" => (
            "Objective (a reduction: max:var, metric:sharpe, count:event)",
            "目标（归约：max:变量、metric:sharpe、count:事件）",
        ),
        "explore.goal" => ("Goal", "方向"),
        "explore.min" => ("lowest", "最小"),
        "explore.max" => ("highest", "最大"),
        "explore.replicates" => ("Replicates in round 1", "第一轮重复次数"),
        "explore.budgetRuns" => ("Budget: runs", "预算：运行次数"),
        "explore.budgetMoney" => ("Budget: US dollars", "预算：美元"),
        "explore.start" => ("Start exploration", "开始探索"),
        "explore.errMetric" => ("Name the objective's metric.", "请填写目标指标。"),
        "explore.errBudget" => (
            "Give a budget: runs (a whole number ≥ 1) or dollars.",
            "请给出预算：运行次数（≥ 1 的整数）或美元。",
        ),
        "explore.errMoney" => (
            "The money budget must be a number of dollars above 0.",
            "金额预算必须是大于 0 的美元数。",
        ),
        "sweep.title" => ("Sweeps", "参数扫描"),
        "sweep.none" => (
            "No sweeps yet: start one from the selected node below.",
            "还没有扫描：可在下方从所选节点开始一次扫描。",
        ),
        "sweep.from" => ("from", "起点"),
        "sweep.progress" => (
            "{{done}}/{{total}} runs done · {{pending}} running · {{failed}} failed",
            "已完成 {{done}}/{{total}} 次运行 · 运行中 {{pending}} · 失败 {{failed}}",
        ),
        "sweep.cell" => ("Cell", "单元"),
        "sweep.runs" => ("Runs", "运行"),
        "sweep.running" => ("running", "运行中"),
        "sweep.failed" => ("failed", "失败"),
        "sweep.pickCell" => ("Select this cell's node in the graph", "在图中选中该单元的节点"),
        "sweep.new" => ("New sweep from node", "从节点新建扫描"),
        "sweep.json" => (
            "Edit as JSON (expert: several axes)",
            "以 JSON 编辑（专家模式：多个轴）",
        ),
        "sweep.axis" => ("Axis label", "轴名称"),
        "sweep.op" => ("Op template (JSON)", "操作模板（JSON）"),
        "sweep.field" => ("Field varied (dotted path in the op)", "变化的字段（操作内的点分路径）"),
        "sweep.values" => ("Values (comma-separated)", "取值（逗号分隔）"),
        "sweep.replicates" => ("Replicates", "重复次数"),
        "sweep.turns" => ("Turns / steps", "轮数 / 步数"),
        "sweep.seed" => ("Seed", "种子"),
        "sweep.metrics" => (
            "Metrics, one a line: name = reduction (max:var, metric:sharpe, count:event, state:key)",
            "指标，每行一个：名称 = 归约（max:变量、metric:sharpe、count:事件、state:键）",
        ),
        "sweep.start" => ("Start sweep", "开始扫描"),
        "sweep.errOp" => ("The op template must be a JSON object.", "操作模板必须是 JSON 对象。"),
        "sweep.errValues" => ("Give at least one value.", "请至少给出一个取值。"),
        "sweep.errReplicates" => ("Replicates must be a whole number ≥ 1.", "重复次数必须是 ≥ 1 的整数。"),
        "sweep.errTurns" => ("Turns must be a whole number.", "轮数必须是整数。"),
        "sweep.errSeed" => ("The seed must be a whole number ≥ 0.", "种子必须是 ≥ 0 的整数。"),
        "sweep.errMetrics" => (
            "Name at least one metric, one a line as name = reduction.",
            "请至少给出一个指标，每行一个，格式为 名称 = 归约。",
        ),
        "sweep.errJson" => ("The sweep file must be a JSON object.", "扫描文件必须是 JSON 对象。"),
        "overlay.siblings" => (
            "Overlay its siblings (a sweep cell's other replicates)",
            "叠加其兄弟节点（扫描单元的其他重复）",
        ),
        "overlay.band" => ("Mean ± sd band of the overlaid runs", "叠加运行的均值 ± 标准差带"),
        "overlay.hint" => (
            "Shift-click another node to overlay its series (dashed).",
            "按住 Shift 点击另一个节点可叠加其序列（虚线）。",
        ),
        "create.llm" => ("LLM player", "LLM 玩家"),
        "create.llmMock" => ("mock (offline, upstream's replies)", "mock（离线，上游的回复）"),
        "create.llmScripted" => (
            "scripted (offline, plays by the rules so games end)",
            "scripted（离线，按规则行动，游戏能结束）",
        ),
        "create.llmServer" => ("the server's LLM settings", "服务器的 LLM 设置"),
        "create.llmNote" => (
            "The server does not report which provider it is configured with (LLM_* variables, --llm-config): choose “the server's LLM settings” to use it.",
            "服务器不会报告其配置的提供方（LLM_* 变量、--llm-config）：如需使用，请选择“服务器的 LLM 设置”。",
        ),
        "nav.new" => ("New", "新建"),
        "trees.new" => ("New tree…", "新建树…"),
        "new.socialDesc" => (
            "A scene of LLM agents: write its setting, the agents and who speaks when.",
            "由 LLM 智能体组成的场景：写下场景设定、智能体以及发言顺序。",
        ),
        "new.tradingDesc" => (
            "A trading episode on the shipped prices or on a CSV of your own.",
            "在内置行情或你自己的 CSV 数据上进行的交易回合。",
        ),
        "new.abmDesc" => (
            "An agent-based model: describe it in words, generate it, check it, refine it.",
            "基于智能体的模型：用文字描述，生成、校验并改进它。",
        ),
        "new.startFrom" => ("Start from", "从已有场景开始"),
        "new.originShipped" => ("shipped", "内置"),
        "new.originSaved" => ("saved v{{v}}", "已保存 v{{v}}"),
        "new.copy" => ("Copy", "复制"),
        "new.json" => ("JSON", "JSON 文档"),
        "new.jsonNotObject" => (
            "A scenario is a JSON object ({…}).",
            "场景必须是一个 JSON 对象（{…}）。",
        ),
        "new.jsonBlocks" => (
            "The JSON above does not parse: fix it to create or save. (The form still shows the last document that parsed.)",
            "上面的 JSON 无法解析：修正后才能创建或保存。（表单仍显示上一次可解析的文档。）",
        ),
        "new.showInJson" => ("show in JSON", "在 JSON 中显示"),
        "new.createTitle" => ("Make a tree", "创建模拟树"),
        "new.createTree" => ("Create tree", "创建树"),
        "new.creating" => ("Creating…", "正在创建…"),
        "new.library" => ("Scenario library", "场景库"),
        "new.saveName" => ("Name", "名称"),
        "new.save" => ("Save to library", "保存到场景库"),
        "new.saveHint" => (
            "1 to 64 letters, digits, '_', '.' or '-'. Saving again under the same name makes a new version.",
            "1 到 64 个字母、数字、“_”、“.”或“-”。以同一名称再次保存会生成新版本。",
        ),
        "new.saved" => (
            "Saved as {{id}}, version {{version}}.",
            "已保存为 {{id}}，版本 {{version}}。",
        ),
        "new.saveVersion" => ("Save as its next version", "保存为下一个版本"),
        "new.nameTaken" => (
            "A saved scenario is already called {{id}}: save this document as its next version with the button below, or choose another name.",
            "已有名为 {{id}} 的已保存场景：可用下方按钮将此文档保存为它的下一个版本，或换一个名称。",
        ),
        "new.fromMissing" => (
            "There is no scenario called {{id}} in the library: choose one under “Start from”.",
            "场景库中没有名为 {{id}} 的场景：请在“从已有场景开始”中选择一个。",
        ),
        "new.versionsOf" => ("Versions of {{id}}:", "{{id}} 的版本："),
        "new.delete" => ("Delete from the library…", "从场景库删除…"),
        "new.deleteConfirm" => (
            "Delete {{id}} and all its versions ({{n}})? Trees made from it keep their copy, and the editor keeps this document.",
            "删除 {{id}} 及其全部版本（{{n}} 个）？由它创建的树保留各自的副本，编辑器中的文档也会保留。",
        ),
        "new.deleteYes" => ("Delete", "删除"),
        "new.deleteNo" => ("Keep it", "保留"),
        "new.deleted" => (
            "Deleted {{id}} from the library. The document is still here: save it to keep it.",
            "已从场景库删除 {{id}}。文档仍在此处：如需保留请再次保存。",
        ),
        "new.scenario" => ("Scenario", "场景"),
        "new.title" => ("Title", "标题"),
        "new.description" => ("Description", "描述"),
        "new.scene" => ("Scene", "场景设定"),
        "new.sceneType" => ("Scene type", "场景类型"),
        "new.sceneName" => ("Scene name", "场景名称"),
        "new.initialEvent" => ("Opening event", "开场事件"),
        "new.moderators" => ("Moderators (comma-separated)", "主持人（逗号分隔）"),
        "new.roles" => (
            "Roles, one per line (name: werewolf | seer | witch | villager)",
            "角色，每行一个（名字: werewolf | seer | witch | villager）",
        ),
        "new.decks" => ("Decks", "牌副数"),
        "new.landlordHint" => ("The card table needs exactly four agents.", "牌桌需要恰好四个智能体。"),
        "new.chatRange" => ("Chat range", "交谈距离"),
        "new.movementCost" => ("Movement cost", "移动消耗"),
        "new.villageHint" => (
            "The village map (size, places, resources) is edited in the JSON view: scene.config.map.",
            "村庄地图（尺寸、地点、资源）请在 JSON 视图中编辑：scene.config.map。",
        ),
        "new.prose" => (
            "Scene prose (what every prompt says of the scene)",
            "场景文本（每个提示词中关于场景的内容）",
        ),
        "new.proseHint" => (
            "Left empty, a part keeps the scene type's own text, shown greyed. An action's line in the prompts is its chip's tooltip; change it in the JSON view: scene.prose.actions.",
            "留空的部分沿用该场景类型自带的文本（灰色显示）。动作在提示词中的说明见其标签的提示；可在 JSON 视图中修改：scene.prose.actions。",
        ),
        "new.customHint" => (
            "A scene you define: each field below is the document's key of that name (docs/scenarios.md, \"A custom scene\", describes every one). Conditions and values are CEL expressions; each agent's role is set on its card.",
            "由你定义的场景：下面每个字段都是文档中同名的键（docs/scenarios.md 的“A custom scene”一节逐一说明）。条件与取值使用 CEL 表达式；每个智能体的角色在其卡片上设置。",
        ),
        "new.cRoles" => ("Roles", "角色"),
        "new.cVariables" => ("Variables", "变量"),
        "new.cActions" => ("Actions", "动作"),
        "new.cPhases" => ("Phases", "阶段"),
        "new.cTallies" => ("Tallies", "计票"),
        "new.cOutcomes" => ("Outcomes", "结局"),
        "new.cEndings" => ("Endings", "结束条件"),
        "new.cMetrics" => ("Metrics", "指标"),
        "new.cParams" => ("Parameters", "参数"),
        "new.cRequire" => ("Requirements", "前提条件"),
        "new.cEffects" => ("Effects", "效果"),
        "new.cOnEnter" => ("On entering", "进入时"),
        "new.cOnExit" => ("On leaving", "离开时"),
        "new.cNext" => ("Next", "下一步"),
        "new.cRemove" => ("Remove", "删除"),
        "new.agentRole" => ("Role", "角色"),
        "new.version" => ("Version", "版本"),
        "new.money" => ("Money budget (US$)", "金额预算（美元）"),
        "new.layout" => ("Prompt layout", "提示词布局"),
        "new.layoutUpstream" => ("Default (state in the system prompt)", "默认（状态在系统提示词中）"),
        "new.layoutStateLast" => (
            "State last (keeps the cache when plans change)",
            "状态置后（计划改变时保留缓存）",
        ),
        "new.layoutNote" => (
            "State last puts each agent's emotion and plan in the last message of its prompt, so a provider's prompt cache keeps serving the rest when a plan changes; its prompts then differ from SocialSim4's.",
            "“状态置后”把每个智能体的情绪和计划放在提示词的最后一条消息里，计划改变时服务商的提示词缓存仍能复用其余部分；此时提示词与 SocialSim4 的不同。",
        ),
        "new.moneyInvalid" => (
            "The money budget must be a number of dollars, 0 or more.",
            "金额预算必须是不小于 0 的美元数。",
        ),
        "new.fromLibrary" => (
            "Creates the tree from the library scenario {{ref}} (edit the document and it is made from your copy instead).",
            "将从场景库中的 {{ref}} 创建树（若编辑了文档，则改为从你的副本创建）。",
        ),
        "new.fromDocument" => (
            "Creates the tree from the document as it is now.",
            "将从当前的文档创建树。",
        ),
        "new.checkOk" => (
            "The server checked the document: a tree can be made of it.",
            "服务器已检查文档：可以用它创建树。",
        ),
        "new.preview" => ("Each role's prompt", "各角色的提示词"),
        "new.previewShow" => ("Show each role's first prompt", "显示各角色的第一个提示词"),
        "new.previewHint" => (
            "What the first agent of each role sends on its first turn, before anyone has acted, built by the server from this document (no model is called). It follows your edits.",
            "每个角色的第一个智能体在第一个回合、任何人行动之前发送的内容，由服务器根据此文档生成（不调用模型），并随编辑更新。",
        ),
        "scene.title" => ("Scene", "场景"),
        "new.proseCopy" => ("Start from the default", "以默认文本为起点"),
        "new.proseDescription" => ("Description", "场景描述"),
        "new.proseRules" => ("Rules", "规则"),
        "new.proseExamples" => ("Examples", "示例"),
        "new.agents" => ("Agents", "智能体"),
        "new.agentName" => ("Name", "名字"),
        "new.profile" => ("Profile", "人物设定"),
        "new.style" => ("Style", "说话风格"),
        "new.actions" => ("Action space", "动作空间"),
        "new.addAgent" => ("Add an agent", "添加智能体"),
        "new.removeAgent" => ("Remove this agent", "移除该智能体"),
        "new.ordering" => ("Who acts next", "行动顺序"),
        "new.orderingKind" => ("Ordering", "顺序策略"),
        "new.orderingNames" => ("Names in turn (comma-separated)", "轮流的名字（逗号分隔）"),
        "new.moderator" => ("Moderator", "主持人"),
        "new.events" => ("Initial events", "初始事件"),
        "new.broadcasts" => ("Public announcements, one per line", "公开公告，每行一条"),
        "new.maxSteps" => ("Steps per turn", "每回合步数"),
        "new.defaultTurns" => ("Default turns", "默认回合数"),
        "new.marketData" => ("Market data", "行情数据"),
        "new.dataset" => ("Dataset", "数据集"),
        "new.uploadCsv" => ("Upload a CSV", "上传 CSV"),
        "new.datasetName" => ("Dataset name", "数据集名称"),
        "new.upload" => ("Upload", "上传"),
        "new.uploading" => ("Uploading…", "正在上传…"),
        "new.uploaded" => (
            "Uploaded: {{name}}. The episode now trades on it.",
            "已上传：{{name}}。本回合现在使用它交易。",
        ),
        "new.rows" => ("{{n}} rows", "{{n}} 行"),
        "new.rowsInFile" => ("{{n}} data rows in the file.", "文件中共有 {{n}} 行数据。"),
        "new.episode" => ("Episode", "交易回合"),
        "new.tickers" => ("Tickers", "股票代码"),
        "new.dates" => ("Dates", "日期"),
        "new.agentKind" => ("Agent", "交易智能体"),
        "new.cash" => ("Cash", "初始资金"),
        "new.describe" => ("Describe the model", "描述模型"),
        "new.describeHint" => (
            "e.g. an SIR epidemic on a contact network, where infected people recover after some days",
            "例如：接触网络上的 SIR 传染病模型，感染者若干天后康复",
        ),
        "new.describeScene" => ("Describe in words", "用文字描述"),
        "new.describeSceneHint" => (
            "e.g. twelve jurors deliberate a theft case with a foreperson and vote until they agree, or the jury is hung",
            "例如：十二名陪审员在一名首席陪审员主持下审议一起盗窃案，投票直到意见一致，否则陪审团僵持",
        ),
        "new.generate" => ("Generate", "生成"),
        "new.undo" => ("Undo", "撤销"),
        "new.abmParams" => ("Parameters", "参数"),
        "new.abmParamsHint" => (
            "The step limit, each global's and each agent attribute's starting value, and each agent type's count (a number, text, or a globalVariable.… reference). Variables, agents and behaviours are added or removed in the JSON view.",
            "步数上限、每个全局变量和智能体属性的初始值，以及每类智能体的数量（数字、文本或 globalVariable.… 引用）。变量、智能体和行为请在 JSON 视图中增删。",
        ),
        "new.undoHint" => (
            "Put back the document as it was before the last Generate or Refine",
            "恢复到上一次生成或改进之前的文档",
        ),
        "new.refine" => ("Refine", "改进"),
        "new.refineHint" => (
            "Sends the description with the model as it stands, to be changed rather than written anew.",
            "把描述连同当前模型一起发送，在其基础上修改而不是重写。",
        ),
        "new.generating" => ("Generating… {{s}} s", "正在生成… {{s}} 秒"),
        "new.validator" => ("Validator", "校验器"),
        "new.abmValid" => ("The validator finds no problems.", "校验器未发现问题。"),
        "new.abmEmpty" => (
            "No model yet: generate one, start from a scenario, or paste one into the JSON view.",
            "还没有模型：生成一个、从已有场景开始，或把模型粘贴到 JSON 视图中。",
        ),
        "new.line" => ("line {{n}}", "第 {{n}} 行"),
        "overlay.mean" => ("mean", "均值"),
        "chart.buy" => ("buy", "买入"),
        "chart.sell" => ("sell", "卖出"),
        // Explorer truth: stopping a fan-out, a create at work, an export on its way.
        "ops.stopAll" => ("Stop all", "全部停止"),
        "create.working" => ("Creating… {{s}} s", "正在创建… {{s}} 秒"),
        "data.exporting" => (
            "Downloading: {{n}} of {{total}} nodes · {{size}}",
            "正在下载：{{n}} / {{total}} 个节点 · {{size}}",
        ),
        "data.exportFailed" => ("The download failed", "下载失败"),
        // The lab notebook.
        "notebook.notes" => ("Notes", "笔记"),
        "notebook.star" => ("Star this node", "给此节点加星标"),
        "notebook.unstar" => ("Remove the star", "取消星标"),
        "notebook.title" => ("Title", "标题"),
        "notebook.titleHint" => ("Name this node (the graph shows it)", "为此节点命名（图中显示）"),
        "notebook.note" => ("Note", "备注"),
        "notebook.noteHint" => ("What happened here, and why it matters", "这里发生了什么，为何重要"),
        "notebook.tags" => ("Tags", "标签"),
        "notebook.tagsHint" => ("comma-separated, e.g. key, ann", "用逗号分隔，如 key, ann"),
        "notebook.tagFilter" => ("Dim the nodes without this tag", "淡化没有此标签的节点"),
        "notebook.allTags" => ("All tags", "全部标签"),
        "notebook.description" => ("About this tree", "关于这棵树"),
        "notebook.descriptionHint" => ("What this tree explores", "这棵树在探索什么"),
        "notebook.save" => ("Save", "保存"),
        "notebook.saved" => ("Saved", "已保存"),
        "notebook.find" => ("Find", "查找"),
        "notebook.findHint" => (
            "Find text in this tree's events, memories, notes and asks",
            "在此树的事件、记忆、笔记和问答中查找",
        ),
        "notebook.prevHit" => ("Previous hit", "上一个结果"),
        "notebook.nextHit" => ("Next hit (Enter)", "下一个结果（回车）"),
        "notebook.noHits" => ("No match", "无匹配"),
        "notebook.hitCount" => (
            "node {{at}}/{{nodes}} · {{hits}} hits",
            "节点 {{at}}/{{nodes}} · 共 {{hits}} 条结果",
        ),
        "notebook.moreHits" => ("More hits", "更多结果"),
        "notebook.callsPage" => (
            "Calls {{from}}–{{to}} of {{total}}",
            "第 {{from}}–{{to}} 次调用，共 {{total}} 次",
        ),
        "notebook.carriedFrom" => ("from #{{id}}", "来自 #{{id}}"),
        "notebook.hitEvent" => ("event", "事件"),
        "notebook.hitMemory" => ("memory", "记忆"),
        "notebook.hitTitle" => ("title", "标题"),
        "notebook.hitNote" => ("note", "备注"),
        "notebook.hitTag" => ("tag", "标签"),
        "notebook.hitAsk" => ("ask", "提问"),
        "notebook.hitCarried" => ("remembered", "仍记得"),
        "notebook.findAll" => ("Search every tree", "搜索所有树"),
        "notebook.findAllHint" => ("Words to find in every tree", "要在所有树中查找的词"),
        "notebook.hitsInAll" => ("{{n}} hits", "共 {{n}} 条结果"),
        "notebook.calls" => ("Calls", "模型调用"),
        "notebook.callsRunning" => (
            "This node is running: its calls can be read when its run ends.",
            "此节点正在运行：运行结束后即可查看其模型调用。",
        ),
        "notebook.noCalls" => ("No model calls.", "没有模型调用。"),
        "notebook.callAsk" => ("interview", "访谈"),
        "notebook.callRetry" => ("attempt {{n}}", "第 {{n}} 次尝试"),
        "notebook.callRecorded" => ("recorded", "已录制"),
        "notebook.prompt" => ("Prompt ({{n}} messages)", "提示（{{n}} 条消息）"),
        "notebook.reply" => ("Reply", "回复"),
        "notebook.action" => ("Action", "动作"),
        "notebook.parseError" => ("Could not be read", "无法解析"),
        "notebook.askAgent" => ("Ask {{name}}", "向 {{name}} 提问"),
        "notebook.askHint" => (
            "A question for this agent, answered from what it knows at this node",
            "向此智能体提问，它将依据在此节点所知作答",
        ),
        "notebook.ask" => ("Ask", "提问"),
        "notebook.asking" => ("Asking…", "提问中…"),
        "notebook.asked" => ("Asked at this node", "在此节点的提问"),
        "notebook.replayed" => ("answered before", "先前已回答"),
        "notebook.callHttpRetries" => ("{{n}} HTTP retries", "HTTP 重试 {{n}} 次"),
        "graph.edgeFilter" => (
            "Dim what sweeps and explorations made (their edges and subtrees)",
            "淡化扫描与探索生成的部分（其边及子树）",
        ),
        "graph.edgesAll" => ("All edges", "全部边"),
        "graph.edgesNoJobs" => ("Dim sweeps & explorations", "淡化扫描与探索"),
        "graph.edgesNoExplore" => ("Dim explorations", "淡化探索"),
        "graph.edgesNoSweep" => ("Dim sweeps", "淡化扫描"),
        "sweep.bootstrap" => ("bootstrap", "自助法"),
        "sweep.effectTitle" => (
            "{{name}} − {{name}} at {{baseline}} ({{method}}, 95%)",
            "{{name}} − 基线 {{baseline}} 处的 {{name}}（{{method}}，95%）",
        ),
        _ => (key, key),
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
    fn every_edge_type_and_op_kind_has_a_chinese_name() {
        use crate::ops::Kind;
        for kind in [Kind::Social, Kind::Trading, Kind::Abm] {
            let legend = kind.legend().iter().map(|s| s.name);
            let ops = crate::editors::op_kinds(kind)
                .iter()
                .copied()
                .filter(|k| *k != "custom");
            for name in legend.chain(ops) {
                assert_eq!(wire_term(Lang::En, name), name);
                assert!(
                    wire_term(Lang::Zh, name)
                        .chars()
                        .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
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
        let mut keys = Vec::new();
        for src in sources {
            for part in src.split(".tr(\"").skip(1).chain(src.split("t(lang, \"").skip(1)) {
                if let Some(end) = part.find('"') {
                    keys.push(part[..end].to_string());
                }
            }
            // The New page's fields take their label's key as an argument.
            for part in src.split("\"new.").skip(1) {
                if let Some(end) = part.find('"') {
                    keys.push(format!("new.{}", &part[..end]));
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
            assert!(
                zh.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
                "{key} is not translated: {zh}"
            );
        }
    }
}
