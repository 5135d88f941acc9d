//! The application shell: shared context (route, language, toasts), client-side routing with the
//! History API, the header with the language switcher, and [`Tree`] — one connected tree (graph
//! model kept live by the tree socket, selection, compare target).

use leptos::prelude::*;
use simtree_shared::{Graph, TreeMsg};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::api::{self, Socket};
use crate::i18n::{Lang, t, toast};
use crate::model::{GraphModel, Toast};
use crate::pages::{Home, SimTreePage, SimViewer, StudioPage};
use crate::route::Route;

/// Context shared by every component.
#[derive(Clone, Copy)]
pub struct Ctx {
    pub route: RwSignal<Route>,
    pub lang: RwSignal<Lang>,
    pub toasts: RwSignal<Vec<(u64, String)>>,
    next_toast: StoredValue<u64>,
}

pub fn ctx() -> Ctx {
    expect_context::<Ctx>()
}

impl Ctx {
    /// Goes to `route` (pushes a history entry).
    pub fn navigate(&self, route: Route) {
        if let Some(h) = web_sys::window().and_then(|w| w.history().ok()) {
            let _ = h.push_state_with_url(&JsValue::NULL, "", Some(&route.href()));
        }
        self.route.set(route);
    }

    /// Shows a toast for five seconds.
    pub fn toast(&self, text: String) {
        let id = self.next_toast.get_value();
        self.next_toast.set_value(id + 1);
        self.toasts.update(|v| v.push((id, text)));
        let toasts = self.toasts;
        leptos::task::spawn_local(async move {
            api::sleep(5000).await;
            toasts.update(|v| v.retain(|(i, _)| *i != id));
        });
    }

    pub fn tr(&self, key: &'static str) -> &'static str {
        t(self.lang.get(), key)
    }
}

fn current_route() -> Route {
    let Some(loc) = web_sys::window().map(|w| w.location()) else {
        return Route::Home;
    };
    Route::parse(&loc.pathname().unwrap_or_default(), &loc.search().unwrap_or_default())
}

fn detect_lang() -> Lang {
    api::storage_get("devui:i18n-lang")
        .and_then(|s| Lang::from_tag(&s))
        .or_else(|| {
            web_sys::window()
                .and_then(|w| w.navigator().language())
                .and_then(|l| Lang::from_tag(&l))
        })
        .unwrap_or(Lang::En)
}

fn set_html_lang(lang: Lang) {
    if let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.document_element())
    {
        let _ = el.set_attribute("lang", lang.html_lang());
    }
}

/// One tree the page is connected to.
#[derive(Clone, Copy)]
pub struct Tree {
    pub id: RwSignal<Option<u64>>,
    pub graph: RwSignal<GraphModel>,
    pub selected: RwSignal<Option<u64>>,
    /// Second node of a comparison (shift-click or the compare input).
    pub compare_with: RwSignal<Option<u64>>,
    /// The latest tree-socket message (pages react to `attached`/`run_finish` of their node).
    pub last_msg: RwSignal<Option<TreeMsg>>,
    socket: StoredValue<Option<Socket>, LocalStorage>,
}

impl Tree {
    pub fn new() -> Tree {
        let tree = Tree {
            id: RwSignal::new(None),
            graph: RwSignal::new(GraphModel::default()),
            selected: RwSignal::new(None),
            compare_with: RwSignal::new(None),
            last_msg: RwSignal::new(None),
            socket: StoredValue::new_local(None),
        };
        on_cleanup(move || tree.socket.set_value(None));
        tree
    }

    /// Connects to tree `id`: fetches the graph (up to 6 tries, 300 ms apart), selects the root,
    /// then follows the tree socket.
    pub fn connect(self, id: u64) {
        self.id.set(Some(id));
        api::storage_set("devui:lastTreeId", &id.to_string());
        let ctx = ctx();
        leptos::task::spawn_local(async move {
            let mut graph = None;
            for _ in 0..6 {
                match api::get::<Graph>(&format!("/devui/simtree/{id}/graph")).await {
                    Ok(g) => {
                        graph = Some(g);
                        break;
                    }
                    Err(_) => api::sleep(300).await,
                }
            }
            let Some(g) = graph else { return };
            if self.id.get_untracked() != Some(id) {
                return;
            }
            self.graph.set(GraphModel::from_graph(&g));
            self.selected.set(Some(g.root));
            let socket = api::connect(&format!("/devui/simtree/{id}/events"), move |text| {
                let Ok(msg) = serde_json::from_str::<TreeMsg>(&text) else {
                    return;
                };
                let mut note = None;
                self.graph.update(|g| note = g.apply(&msg));
                match note {
                    Some(Toast::Started(n)) => ctx.toast(toast(ctx.lang.get_untracked(), "toasts.nodeStarted", n)),
                    Some(Toast::Finished(n)) => ctx.toast(toast(ctx.lang.get_untracked(), "toasts.nodeFinished", n)),
                    None => {}
                }
                if let TreeMsg::Deleted { .. } = msg {
                    let gone = self
                        .selected
                        .get_untracked()
                        .is_some_and(|s| !self.graph.with_untracked(|g| g.nodes.contains_key(&s)));
                    if gone {
                        self.selected.set(Some(self.graph.with_untracked(|g| g.root)));
                    }
                }
                self.last_msg.set(Some(msg));
            });
            match socket {
                Ok(s) => self.socket.set_value(Some(s)),
                Err(e) => ctx.toast(e),
            }
        });
    }

    /// Re-reads the graph over REST (the Refresh button).
    pub fn refresh(self) {
        let Some(id) = self.id.get_untracked() else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(g) = api::get::<Graph>(&format!("/devui/simtree/{id}/graph")).await {
                self.graph.set(GraphModel::from_graph(&g));
            }
        });
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

/// An in-app link: a real `href` (deep-linkable), navigation without a reload.
#[component]
pub fn Link(route: Route, #[prop(optional)] id: &'static str, children: Children) -> impl IntoView {
    let ctx = ctx();
    let href = route.href();
    view! {
        <a
            id=id
            href=href
            on:click=move |ev: web_sys::MouseEvent| {
                ev.prevent_default();
                ctx.navigate(route.clone());
            }
        >
            {children()}
        </a>
    }
}

#[component]
fn LangSwitch() -> impl IntoView {
    let ctx = ctx();
    let open = RwSignal::new(false);
    let choose = move |lang: Lang| {
        ctx.lang.set(lang);
        api::storage_set("devui:i18n-lang", lang.code());
        set_html_lang(lang);
        open.set(false);
    };
    view! {
        <div class="lang-switch">
            <button id="lang-button" on:click=move |_| open.update(|o| *o = !*o)>{move || ctx.lang.get().button()}</button>
            <Show when=move || open.get()>
                <div class="lang-menu">
                    <button id="lang-en" on:click=move |_| choose(Lang::En)>"English"</button>
                    <button id="lang-zh" on:click=move |_| choose(Lang::Zh)>"中文"</button>
                </div>
            </Show>
        </div>
    }
}

#[component]
pub fn App() -> impl IntoView {
    let lang = detect_lang();
    set_html_lang(lang);
    let ctx = Ctx {
        route: RwSignal::new(current_route()),
        lang: RwSignal::new(lang),
        toasts: RwSignal::new(Vec::new()),
        next_toast: StoredValue::new(0),
    };
    provide_context(ctx);
    // Back/forward buttons.
    let on_pop = Closure::<dyn FnMut()>::new(move || ctx.route.set(current_route()));
    if let Some(w) = web_sys::window() {
        let _ = w.add_event_listener_with_callback("popstate", on_pop.as_ref().unchecked_ref());
    }
    on_pop.forget();

    let page = move || match ctx.route.get() {
        Route::Home => view! { <Home /> }.into_any(),
        Route::SimTree(id) => view! { <SimTreePage tree_id=id /> }.into_any(),
        Route::Studio(id) => view! { <StudioPage tree_id=id /> }.into_any(),
        Route::Sim { tree, node } => view! { <SimViewer tree_id=tree node=node /> }.into_any(),
    };
    view! {
        <header class="top">
            <span class="title">{move || ctx.tr("app.title")}</span>
            <nav>
                <Link route=Route::Home id="nav-home">{move || ctx.tr("nav.home")}</Link>
                <Link route=Route::SimTree(None) id="nav-tree">{move || ctx.tr("nav.tree")}</Link>
                <Link route=Route::Studio(None) id="nav-studio">{move || ctx.tr("nav.studio")}</Link>
                <Link route=Route::Sim { tree: None, node: 0 } id="nav-sim">{move || ctx.tr("nav.sim")}</Link>
            </nav>
            <LangSwitch />
        </header>
        <main>{page}</main>
        <div class="toasts">
            <For each=move || ctx.toasts.get() key=|(id, _)| *id children=|(_, text)| view! { <div class="toast">{text}</div> } />
        </div>
    }
}
