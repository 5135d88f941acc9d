//! The application shell: it provides the shared context ([`crate::state::Ctx`]), routes with the
//! History API to the pages, and draws the top bar, the offline banner and the status bar with
//! toasts. Pages import their state from [`crate::state`], never from here.

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::api;
use crate::i18n::{Lang, t};
use crate::model::{Level, Note, Toasts};
use crate::pages::{Home, NewPage, SimTreePage, SimViewer, StudioPage};
use crate::route::Route;
use crate::state::{Ctx, Link, ctx, set_title};

fn current_route() -> Route {
    let Some(loc) = web_sys::window().map(|w| w.location()) else {
        return Route::Home;
    };
    Route::parse(&loc.pathname().unwrap_or_default(), &loc.search().unwrap_or_default())
}

fn detect_lang() -> Lang {
    api::storage_get("devui:i18n-lang")
        .and_then(|s| Lang::from_tag(&s))
        .or_else(|| web_sys::window().and_then(|w| w.navigator().language()).and_then(|l| Lang::from_tag(&l)))
        .unwrap_or(Lang::En)
}

fn set_root_attr(name: &str, value: Option<&str>) {
    if let Some(el) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.document_element()) {
        let _ = match value {
            Some(v) => el.set_attribute(name, v),
            None => el.remove_attribute(name),
        };
    }
}

#[component]
fn LangSwitch() -> impl IntoView {
    let ctx = ctx();
    let open = RwSignal::new(false);
    let choose = move |lang: Lang| {
        ctx.lang.set(lang);
        api::storage_set("devui:i18n-lang", lang.code());
        set_root_attr("lang", Some(lang.html_lang()));
        open.set(false);
    };
    view! {
        <div class="lang-switch">
            <button id="lang-button" class="ghost" title=move || ctx.tr("nav.language") on:click=move |_| open.update(|o| *o = !*o)>
                {move || ctx.lang.get().button()}
            </button>
            <Show when=move || open.get()>
                <div class="menu">
                    <button id="lang-en" class="ghost" on:click=move |_| choose(Lang::En)>"English"</button>
                    <button id="lang-zh" class="ghost" on:click=move |_| choose(Lang::Zh)>"中文"</button>
                </div>
            </Show>
        </div>
    }
}

/// Keeps `dark` equal to whether the system asks for a dark theme, for the page's lifetime.
fn follow_system_theme(dark: RwSignal<bool>) {
    let Some(query) = web_sys::window().and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten())
    else {
        return;
    };
    dark.set(query.matches());
    let watched = query.clone();
    let on_change = Closure::<dyn FnMut()>::new(move || dark.set(watched.matches()));
    let _ = query.add_event_listener_with_callback("change", on_change.as_ref().unchecked_ref());
    on_change.forget();
}

/// Light / dark / system, stored in localStorage and applied as `<html data-theme>`.
#[component]
fn ThemeToggle() -> impl IntoView {
    let ctx = ctx();
    let next = move || match ctx.theme.get() {
        None => Some("dark"),
        Some("dark") => Some("light"),
        _ => None,
    };
    view! {
        <button
            id="theme-toggle"
            class="ghost"
            title=move || ctx.tr("theme.toggle")
            on:click=move |_| {
                let n = next();
                ctx.theme.set(n);
                set_root_attr("data-theme", n);
                api::storage_set("devui:theme", n.unwrap_or(""));
            }
        >
            {move || match ctx.theme.get() {
                Some("dark") => "☾",
                Some(_) => "☀",
                None => "◐",
            }}
        </button>
    }
}

/// The notifications, in the status bar (they never cover the controls).
#[component]
fn ToastList() -> impl IntoView {
    let ctx = ctx();
    let text = move |note: &Note| {
        let lang = ctx.lang.get();
        let ids = |ns: &[u64]| ns.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        match note {
            Note::Finished(ns) if ns.len() == 1 => t(lang, "toasts.nodeFinished").replace("{{id}}", &ns[0].to_string()),
            Note::Finished(ns) => t(lang, "toasts.runsFinished")
                .replace("{{n}}", &ns.len().to_string())
                .replace("{{ids}}", &crate::ops::ellipsis(&ids(ns), 40)),
            Note::Cancelled(ns) => t(lang, "toasts.cancelled").replace("{{ids}}", &ids(ns)),
            Note::Failed { node, reason } => {
                t(lang, "toasts.nodeFailed").replace("{{id}}", &node.to_string()).replace("{{reason}}", reason)
            }
            Note::Text(s) => s.clone(),
        }
    };
    view! {
        <div class="toasts" role="status">
            <For
                each=move || ctx.toasts.get().items
                key=|t| (t.id, t.touched, t.count)
                children=move |item| {
                    let id = item.id;
                    let count = (item.count > 1).then(|| format!(" ×{}", item.count));
                    view! {
                        <div class=if item.level == Level::Error { "toast error" } else { "toast" }>
                            <span class="toast-text">{text(&item.note)}{count}</span>
                            <button class="toast-close ghost" title="Dismiss" on:click=move |_| ctx.toasts.update(|t| t.dismiss(id))>"×"</button>
                        </div>
                    }
                }
            />
        </div>
    }
}

#[component]
pub fn App() -> impl IntoView {
    let lang = detect_lang();
    set_root_attr("lang", Some(lang.html_lang()));
    let theme = match api::storage_get("devui:theme").as_deref() {
        Some("dark") => Some("dark"),
        Some("light") => Some("light"),
        _ => None,
    };
    set_root_attr("data-theme", theme);
    let ctx = Ctx {
        route: RwSignal::new(current_route()),
        lang: RwSignal::new(lang),
        toasts: RwSignal::new(Toasts::default()),
        offline: RwSignal::new(false),
        theme: RwSignal::new(theme),
        system_dark: RwSignal::new(false),
        spent: RwSignal::new(0),
    };
    follow_system_theme(ctx.system_dark);
    provide_context(ctx);
    // Back/forward buttons.
    let on_pop = Closure::<dyn FnMut()>::new(move || ctx.route.set(current_route()));
    if let Some(w) = web_sys::window() {
        let _ = w.add_event_listener_with_callback("popstate", on_pop.as_ref().unchecked_ref());
    }
    on_pop.forget();
    Effect::new(move |_| {
        if matches!(ctx.route.get(), Route::Home) {
            set_title("simtree");
        }
    });

    // The page is made anew only when the route changes: a selected node in the address
    // (`?node=N`) is not part of it, so selecting (or going back to) a node keeps the page.
    // The New page is one page whatever kind it shows (its drafts live as long as it does).
    let page_route = Memo::new(move |_| match ctx.route.get() {
        Route::New { .. } => Route::New { kind: None, from: None },
        r => r,
    });
    let page = move || match page_route.get() {
        Route::Home => view! { <Home /> }.into_any(),
        Route::New { .. } => view! { <NewPage /> }.into_any(),
        Route::SimTree(id) => view! { <SimTreePage tree_id=id /> }.into_any(),
        Route::Studio(id) => view! { <StudioPage tree_id=id /> }.into_any(),
        Route::Sim { tree, node } => view! { <SimViewer tree_id=tree node=node /> }.into_any(),
    };
    view! {
        <div class="shell">
            <header class="top">
                <span class="brand">{move || ctx.tr("app.title")}</span>
                <nav>
                    <Link route=Route::Home id="nav-home">{move || ctx.tr("nav.home")}</Link>
                    <Link route=Route::New { kind: None, from: None } id="nav-new">{move || ctx.tr("nav.new")}</Link>
                    <Link route=Route::SimTree(None) id="nav-tree">{move || ctx.tr("nav.tree")}</Link>
                    <Link route=Route::Studio(None) id="nav-studio">{move || ctx.tr("nav.studio")}</Link>
                    <Link route=Route::Sim { tree: None, node: 0 } id="nav-sim">{move || ctx.tr("nav.sim")}</Link>
                </nav>
                <span class="spacer"></span>
                <ThemeToggle />
                <LangSwitch />
            </header>
            <Show when=move || ctx.offline.get()>
                <div id="offline-banner" class="banner" role="alert">
                    <strong>{move || ctx.tr("offline.title")}</strong>
                    " "
                    {move || ctx.tr("offline.body")}
                </div>
            </Show>
            <main>{page}</main>
            <footer class="statusbar">
                <ToastList />
            </footer>
        </div>
    }
}
