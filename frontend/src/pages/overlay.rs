//! Chart overlays: other nodes' series drawn dashed beside the selected node's, or all of them
//! as a mean with a ± sd band.

use leptos::prelude::*;

use crate::chart::{COLOURS, Tracked, mean_bands, short_name};
use crate::plot::{Band, Line};
use crate::state::{Tree, ctx};

/// Nodes overlaid on a chart, each with its series.
pub(super) type Overlaid = RwSignal<Vec<(u64, Vec<Tracked>)>>;

/// What a node's chart overlays: its siblings too, and the runs as a mean with a band.
#[derive(Clone, Copy)]
pub(super) struct OverlayChoice {
    pub(super) siblings: RwSignal<bool>,
    pub(super) band: RwSignal<bool>,
}

/// The overlaid nodes' series, re-read by `read` (from their logs or views) when the selection,
/// the compare target or the `siblings` choice changes.
pub(super) fn overlays<F, Fut>(tree: Tree, siblings: RwSignal<bool>, read: F) -> Overlaid
where
    F: Fn(u64, u64) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Option<Vec<Tracked>>> + 'static,
{
    let others = RwSignal::new(Vec::new());
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        let overlay = overlaid(tree, n, siblings.get());
        leptos::task::spawn_local(async move {
            let mut got = Vec::new();
            for m in overlay {
                if tree.is_running(m) {
                    continue;
                }
                if let Some(series) = read(t, m).await {
                    got.push((m, series));
                }
            }
            if tree.selected.get_untracked() == Some(n) {
                others.set(got);
            }
        });
    });
    others
}

/// The overlay choices under a chart.
#[component]
pub(super) fn OverlayOptions(choice: OverlayChoice) -> impl IntoView {
    let ctx = ctx();
    let OverlayChoice { siblings, band } = choice;
    view! {
        <div class="row overlay-options">
            <label class="check">
                <input id="overlay-siblings" type="checkbox" prop:checked=move || siblings.get() on:change=move |ev| siblings.set(event_target_checked(&ev)) />
                {move || ctx.tr("overlay.siblings")}
            </label>
            <label class="check">
                <input id="overlay-band" type="checkbox" prop:checked=move || band.get() on:change=move |ev| band.set(event_target_checked(&ev)) />
                {move || ctx.tr("overlay.band")}
            </label>
        </div>
        <p class="muted">{move || ctx.tr("overlay.hint")}</p>
    }
}

/// Tracked variables as chart lines: the selected node's (`own`, solid) and overlaid nodes'
/// (dashed); a variable keeps its colour in all, and the legend names the node of each line.
pub(super) fn series_lines(own: (u64, &[Tracked]), others: &[(u64, Vec<Tracked>)]) -> Vec<Line> {
    let (n, solid) = own;
    let names: &Vec<&str> = &solid.iter().chain(others.iter().flat_map(|(_, d)| d)).map(|(v, _)| v.as_str()).collect();
    let line = |node: u64, dash: &'static str| {
        move |(name, values): &Tracked| Line {
            class: "series",
            name: name.clone(),
            label: format!("{} (#{node})", short_name(name)),
            values: values.clone(),
            colour: variable_colour(names, name),
            dash,
        }
    };
    let mut lines: Vec<Line> = solid.iter().map(line(n, "")).collect();
    for (m, d) in others {
        lines.extend(d.iter().map(line(*m, "5 3")));
    }
    lines
}

/// A variable's colour: by its first place among `names`, so it matches across nodes.
pub(super) fn variable_colour(names: &[&str], name: &str) -> &'static str {
    COLOURS[names.iter().position(|v| *v == name).unwrap_or(0) % COLOURS.len()]
}

/// The overlaid runs as one mean line per variable over a band of ± sd (`mean_word` names the
/// line in the UI's language).
pub(super) fn mean_lines(runs: &[&[Tracked]], mean_word: &str) -> (Vec<Line>, Vec<Band>) {
    let bands = mean_bands(runs);
    let names: Vec<&str> = bands.iter().map(|b| b.name.as_str()).collect();
    let lines = bands
        .iter()
        .map(|b| Line {
            class: "mean",
            name: b.name.clone(),
            label: format!("{} {mean_word} ± sd (n={})", short_name(&b.name), b.runs),
            values: b.mean.clone(),
            colour: variable_colour(&names, &b.name),
            dash: "",
        })
        .collect();
    let shaded = bands
        .iter()
        .map(|b| Band {
            name: b.name.clone(),
            lo: b.lo.clone(),
            hi: b.hi.clone(),
            colour: variable_colour(&names, &b.name),
        })
        .collect();
    (lines, shaded)
}

/// The nodes overlaid on the selected one's chart: the compare target and, when asked, the
/// selected node's siblings (a sweep cell's other replicates).
pub(super) fn overlaid(tree: Tree, node: u64, siblings: bool) -> Vec<u64> {
    let mut out: Vec<u64> = tree.compare_with.get().into_iter().filter(|c| *c != node).collect();
    if siblings {
        let parent = tree.graph.with(|g| g.parent_of(node));
        let kin = tree.graph.with(|g| {
            g.edges.iter().filter(|e| Some(e.from) == parent && e.to != node).map(|e| e.to).collect::<Vec<_>>()
        });
        for k in kin {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// The overlaid nodes split for a band: the ones it may pool (the selected node's siblings, runs
/// of the same treatment) and the ones drawn apart (the compare target, another treatment, even
/// when it is a sibling too).
pub(super) fn pooled_and_apart(tree: Tree, others: &[(u64, Vec<Tracked>)]) -> (Series, Series) {
    let target = tree.compare_with.get();
    others.iter().cloned().partition(|(m, _)| Some(*m) != target)
}

/// Overlaid nodes with their series, as a plain list.
pub(super) type Series = Vec<(u64, Vec<Tracked>)>;
