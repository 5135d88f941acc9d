//! The simtree web UI: a Leptos (CSR) app compiled to wasm32 and served by `simtree serve`.
//!
//! Pure logic — the graph reducer, context deltas, event formatting, the tree layout, routes,
//! i18n, node comparison, op labels — lives in plain modules tested on the native target
//! (`model`, `layout`, `route`, `i18n`, `compare`, `ops`, `chart`, `editors`, `export`, `when`, `abm_form`,
//! `sweep`, `notebook`). Components (`app`, `state`, `graph`, `pages`, `sweep_view`) only wire it to the DOM, and
//! `api` talks to the server (fetch, WebSockets); `plot` draws [`chart`]'s line charts.

pub mod abm_form;
pub mod chart;
pub mod compare;
pub mod draft;
pub mod editors;
pub mod explore;
pub mod export;
pub mod i18n;
pub mod layout;
pub mod live;
pub mod model;
pub mod notebook;
pub mod ops;
pub mod route;
pub mod scene_form;
pub mod sweep;
pub mod when;

mod api;
mod app;
mod branch;
mod data;
mod estimate;
mod explore_view;
mod field;
mod graph;
mod job_view;
mod pages;
mod plot;
mod state;
mod sweep_view;
mod trees;
mod wait;

use wasm_bindgen::prelude::*;

/// Marks a moment of the page's life on the browser's Performance timeline as `simtree:<what>`
/// (the UI benchmark prints them to show where a load's time goes).
pub(crate) fn mark(what: &str) {
    if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
        let _ = p.mark(&format!("simtree:{what}"));
    }
}

/// Entry point called by the generated JS glue.
#[wasm_bindgen(start)]
pub fn start() {
    mark("start");
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
    // The page is built; its effects and the graph's read run after this.
    mark("mounted");
}
