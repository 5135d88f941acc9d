//! The graph's keyboard map ([`KEYS`], listed by the help overlay): fit, walk the tree with the
//! arrows, advance, branch, delete, fold, search, zoom. Keys typed into a field are the field's.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::state::GraphState;

/// The keyboard map the help overlay lists: key, i18n key of what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("f", "keys.fit"),
    ("↑ ↓", "keys.parentChild"),
    ("← →", "keys.siblings"),
    ("a", "keys.advance"),
    ("b", "keys.branch"),
    ("Delete", "keys.delete"),
    ("c", "keys.collapse"),
    ("/", "keys.search"),
    ("+ −", "keys.zoom"),
    ("?", "keys.help"),
];

/// Clicks the enabled button `css` (the keyboard's way to reach the panels' actions).
fn press(css: &str) -> bool {
    let el = document().query_selector(css).ok().flatten().and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
    match el {
        Some(b) if !b.has_attribute("disabled") => {
            b.click();
            true
        }
        _ => false,
    }
}

/// Listens to the keyboard for the graph's lifetime (not while typing in a field).
pub(super) fn listen(g: GraphState) {
    let tree = g.tree;
    let keys = window_event_listener(leptos::ev::keydown, move |ev: web_sys::KeyboardEvent| {
        let typing = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"));
        if typing || ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
            return;
        }
        let sel = tree.selected.get_untracked();
        let next = tree.graph.with_untracked(|g| {
            let s = sel?;
            let siblings = |d: i64| {
                let p = g.parent_of(s)?;
                let kids = g.children().remove(&p)?;
                let i = kids.iter().position(|&k| k == s)? as i64 + d;
                kids.get(usize::try_from(i).ok()?).copied()
            };
            match ev.key().as_str() {
                "ArrowUp" => g.parent_of(s),
                "ArrowDown" => g.children().get(&s).and_then(|k| k.first().copied()),
                "ArrowLeft" => siblings(-1),
                "ArrowRight" => siblings(1),
                _ => None,
            }
        });
        match ev.key().as_str() {
            "f" => g.fit_now(),
            "+" | "=" => g.zoom(1.25),
            "-" => g.zoom(0.8),
            "a" => {
                press("#advance-btn");
            }
            "b" => {
                if let Some(el) = document().query_selector("#op-kind").ok().flatten() {
                    el.scroll_into_view();
                    if let Ok(el) = el.dyn_into::<web_sys::HtmlElement>() {
                        let _ = el.focus();
                    }
                }
            }
            "Delete" => {
                press("#delete-btn");
            }
            "c" => g.toggle_collapse(),
            "?" => g.help.update(|h| *h = !*h),
            "Escape" => g.help.set(false),
            "/" => {
                ev.prevent_default();
                if let Some(el) = g.search_box.get_untracked() {
                    let _ = el.focus();
                }
            }
            k if k.starts_with("Arrow") => {
                ev.prevent_default();
                if let Some(n) = next {
                    tree.selected.set(Some(n));
                }
            }
            _ => {}
        }
    });
    on_cleanup(move || keys.remove());
}
