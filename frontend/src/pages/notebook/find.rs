//! Find in a tree: the words typed go to `GET …/search?q=` (as typed: the server takes them as a
//! phrase and refuses what it cannot take with a 4xx, shown under the box). The nodes hit light up
//! in the graph ([`Tree::lit`]), the hits are listed best first with their snippets, and Enter,
//! ▶ and ◀ walk from one hit node to the next, selecting it — which moves the address's
//! `?node=` and brings the node into view. Typing searches when the words rest (Enter need not
//! be pressed), and a search reads every page of its hits up to a bound, so none is left unlit.

use leptos::prelude::*;
use simtree_shared::SearchHit;

use super::{PAGE, kind_key, search_box, snippet_view};

/// Pages of hits read one after another by a search (PAGE each); More reads on beyond them.
const AUTO_PAGES: u32 = 10;

/// How long typed words rest before they are searched (ms).
const TYPING_MS: i32 = 400;
use crate::api;
use crate::notebook::{hit_nodes, step};
use crate::state::{Tree, ctx};

/// What the last search found.
#[derive(Clone, Default)]
struct Found {
    /// The words searched.
    query: String,
    hits: Vec<SearchHit>,
    total: u64,
    next: Option<u64>,
}

#[component]
pub fn FindBar(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let query = RwSignal::new(String::new());
    let found = RwSignal::new(None::<Found>);
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let nodes = Memo::new(move |_| found.with(|f| f.as_ref().map(|f| hit_nodes(&f.hits)).unwrap_or_default()));
    // Another tree: nothing of this one's search stays lit.
    let clear = move || {
        found.set(None);
        error.set(None);
        tree.lit.set(Default::default());
    };
    Effect::new(move |before: Option<Option<u64>>| {
        let id = tree.id.get();
        if before.is_some_and(|b| b != id) {
            clear();
        }
        id
    });
    let jump = move |forward: bool| {
        let to = nodes.with_untracked(|n| step(n, tree.selected.get_untracked(), forward));
        if let Some(n) = to {
            tree.selected.set(Some(n));
        }
    };
    // Each search (and each keystroke) takes a number: a search goes on only while its number
    // is the latest, so words typed since stop an older one.
    let latest = StoredValue::new(0u64);
    // Hits from `offset` (0: a new search, which selects its best hit), page after page up to
    // AUTO_PAGES, so that every hit lights up and is walked; More reads on beyond that.
    let search = move |offset: u64| {
        let Some(t) = tree.id.get_untracked() else { return };
        let q = query.get_untracked();
        latest.update_value(|n| *n += 1);
        let mine = latest.get_value();
        busy.set(true);
        leptos::task::spawn_local(async move {
            let mut offset = offset;
            for page in 0..AUTO_PAGES {
                let reply = api::search_tree(t, &q, offset, PAGE).await;
                if tree.id.try_get_untracked() != Some(Some(t)) || latest.try_get_value() != Some(mine) {
                    break;
                }
                let Ok(r) = reply.map_err(|e| {
                    found.set(None);
                    tree.lit.set(Default::default());
                    error.set(ctx.refusal(e));
                }) else {
                    break;
                };
                error.set(None);
                let next = r.next;
                found.update(|f| {
                    let mut hits = if offset == 0 { Vec::new() } else { f.take().map(|f| f.hits).unwrap_or_default() };
                    hits.extend(r.hits);
                    *f = Some(Found { query: q.clone(), hits, total: r.total, next });
                });
                tree.lit.set(nodes.get_untracked().into_iter().collect());
                if offset == 0 && page == 0 {
                    jump(true);
                }
                match next {
                    Some(n) => offset = n,
                    None => break,
                }
            }
            busy.try_set(false);
        });
    };
    // Typing searches once the words rest for TYPING_MS; emptied, the box clears the search.
    Effect::new(move |before: Option<String>| {
        let q = query.get();
        if before.is_none() {
            return q;
        }
        latest.update_value(|n| *n += 1);
        let mine = latest.get_value();
        let typed = q.clone();
        leptos::task::spawn_local(async move {
            let q = typed;
            api::sleep(TYPING_MS).await;
            if latest.try_get_value() != Some(mine) {
                return;
            }
            if q.trim().is_empty() {
                clear();
            } else if found.with_untracked(|f| f.as_ref().is_none_or(|f| f.query != q)) {
                search(0);
            }
        });
        q
    });
    // Enter searches at once; Enter again on the same words goes to the next hit.
    let submit = move || {
        let same = found.with_untracked(|f| f.as_ref().is_some_and(|f| f.query == query.get_untracked()));
        if same {
            jump(true);
        } else {
            search(0);
        }
    };
    let count = move || {
        let f = found.get()?;
        let n = nodes.with(Vec::len);
        let at = tree.selected.get().and_then(|s| nodes.with(|ns| ns.iter().position(|x| *x == s)));
        let at = at.map_or_else(|| "–".to_string(), |i| (i + 1).to_string());
        Some(if f.total == 0 {
            ctx.tr("notebook.noHits").to_string()
        } else {
            ctx.tr("notebook.hitCount")
                .replace("{{at}}", &at)
                .replace("{{nodes}}", &n.to_string())
                .replace("{{hits}}", &f.total.to_string())
        })
    };
    let no_hits = move || nodes.with(Vec::is_empty);
    view! {
        <div id="find" class="find-bar">
            <div class="row">
                {search_box("find-input", "notebook.findHint", query, submit, clear)}
                <button id="find-btn" disabled=move || busy.get() || tree.id.get().is_none() on:click=move |_| search(0)>
                    {move || ctx.tr("notebook.find")}
                </button>
                <button id="find-prev" title=move || ctx.tr("notebook.prevHit") disabled=no_hits on:click=move |_| jump(false)>"◀"</button>
                <button id="find-next" title=move || ctx.tr("notebook.nextHit") disabled=no_hits on:click=move |_| jump(true)>"▶"</button>
                <span id="find-count" class="muted">{count}</span>
                <Show when=move || found.with(Option::is_some) || error.with(Option::is_some)>
                    <button id="find-clear" class="ghost" title=move || ctx.tr("common.close") on:click=move |_| clear()>"✕"</button>
                </Show>
            </div>
            {move || error.get().map(|e| view! { <p id="find-error" class="error field-error">{e}</p> })}
            <Show when=move || found.with(|f| f.as_ref().is_some_and(|f| !f.hits.is_empty()))>
                <ol id="find-hits" class="hits">
                    {move || {
                        let Some(f) = found.get() else { return Vec::new() };
                        f.hits
                            .iter()
                            .map(|h| {
                                let node = h.node;
                                let carried = h.from.map(|from| {
                                    ctx.tr("notebook.carriedFrom").replace("{{id}}", &from.to_string())
                                });
                                view! {
                                    <li
                                        class=move || if tree.selected.get() == Some(node) { "hit current" } else { "hit" }
                                        data-node=node.to_string()
                                        on:click=move |_| tree.selected.set(Some(node))
                                    >
                                        <span class="hit-node">{format!("#{node}")}</span>
                                        <span class="chip">{ctx.tr(kind_key(h.kind))}</span>
                                        {carried.map(|c| view! { <span class="muted">{c}</span> })}
                                        " "
                                        {snippet_view(&h.snippet, &f.query)}
                                    </li>
                                }
                            })
                            .collect::<Vec<_>>()
                    }}
                    {move || found.with(|f| f.as_ref().and_then(|f| f.next)).map(|next| view! {
                        <li class="more">
                            <button id="find-more" disabled=move || busy.get() on:click=move |_| search(next)>
                                {move || ctx.tr("notebook.moreHits")}
                            </button>
                        </li>
                    })}
                </ol>
            </Show>
        </div>
    }
}
