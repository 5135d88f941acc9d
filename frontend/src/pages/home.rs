//! Home: what a tree is and the three kinds of simulation, the three ways to work (SimTree,
//! Studio, the viewer) and the tree browser.

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
        <section id="home-intro" class="panel intro">
            <p>{move || ctx.tr("home.intro")}</p>
            <h3>{move || ctx.tr("home.kinds")}</h3>
            <ul id="home-kinds">
                <li>{move || ctx.tr("home.kindSocial")}</li>
                <li>{move || ctx.tr("home.kindTrading")}</li>
                <li>{move || ctx.tr("home.kindAbm")}</li>
            </ul>
        </section>
        <div class="home">
            {card(Route::SimTree(None), "home.tree", "home.treeDesc")}
            {card(Route::Studio(None), "home.studio", "home.studioDesc")}
            {card(Route::Sim { tree: None, node: 0 }, "home.sim", "home.simDesc")}
        </div>
        <super::notebook::GlobalSearch />
        <crate::trees::TreeBrowser />
    }
}
