//! Home: the three kinds of work (SimTree, Studio, the viewer) and the tree browser.

use leptos::prelude::*;

use crate::route::Route;
use crate::state::{Link, ctx};

#[component]
pub fn Home() -> impl IntoView {
    let ctx = ctx();
    let card = move |route: Route, title: &'static str, desc: &'static str| {
        view! {
            <div class="card">
                <h2><Link route=route>{move || ctx.tr(title)}</Link></h2>
                <p>{move || ctx.tr(desc)}</p>
            </div>
        }
    };
    view! {
        <div class="home">
            {card(Route::SimTree(None), "home.tree", "home.treeDesc")}
            {card(Route::Studio(None), "home.studio", "home.studioDesc")}
            {card(Route::Sim { tree: None, node: 0 }, "home.sim", "home.simDesc")}
        </div>
        <crate::trees::TreeBrowser />
    }
}
