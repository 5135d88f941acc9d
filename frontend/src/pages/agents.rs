//! The agent picker and the chosen agent's memory (Studio and the viewer), and in Studio the
//! Ask box of the chosen agent.

use leptos::html;
use leptos::prelude::*;

use super::events::stick_to_bottom;
use crate::model::NodeView;
use crate::state::ctx;

/// The agent dropdown and the chosen agent's memory.
#[component]
pub(super) fn AgentsPanel(
    view_state: RwSignal<NodeView>,
    stick: RwSignal<bool>,
    /// The tree of the node shown, when its agents may be asked questions (the Ask box).
    #[prop(optional, into)]
    ask_in: Option<Signal<Option<u64>>>,
) -> impl IntoView {
    let ctx = ctx();
    let chosen = RwSignal::new(String::new());
    Effect::new(move |_| {
        let names: Vec<String> = view_state.with(|v| v.agents.iter().map(|a| a.name.clone()).collect());
        if !names.contains(&chosen.get_untracked()) {
            chosen.set(names.first().cloned().unwrap_or_default());
        }
    });
    let el = NodeRef::<html::Div>::new();
    stick_to_bottom(stick, el, move || {
        chosen.track();
        view_state.with(|v| v.agents.iter().map(|a| a.memory.len()).sum::<usize>())
    });
    // The chosen agent's role and plan at this node (an empty plan is not shown).
    let about = move || {
        view_state.with(|v| {
            let a = v.agents.iter().find(|a| a.name == chosen.get())?;
            let words = ["agent.goals", "agent.milestones", "agent.strategy", "agent.notes"].map(|k| ctx.tr(k));
            let plan = crate::model::plan_text(&a.plan, words);
            Some((a.role.clone(), plan))
        })
    };
    // The chosen agent's properties at this node, as key/value lines.
    let properties = move || {
        view_state.with(|v| {
            v.agents
                .iter()
                .find(|a| a.name == chosen.get())
                .map(|a| {
                    a.properties.iter().map(|(k, v)| (k.clone(), crate::model::property_text(v))).collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    };
    let memory = move || {
        view_state
            .with(|v| v.agents.iter().find(|a| a.name == chosen.get()).map(|a| a.memory.clone()).unwrap_or_default())
    };
    // An agent-based model's node: steps and no agents (a node still loading has neither).
    let no_agents = move || {
        view_state.with(|v| {
            v.agents.is_empty() && v.events.iter().any(|e| e.event_type() == Some(simtree_shared::EventType::AbmStep))
        })
    };
    view! {
        <div class="agents">
            <Show when=no_agents>
                <p id="no-agents" class="muted">{move || ctx.tr("common.noAgents")}</p>
            </Show>
            <select id="agent-select" hidden=no_agents on:change=move |ev| chosen.set(event_target_value(&ev)) prop:value=move || chosen.get()>
                <For
                    each=move || view_state.with(|v| v.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>())
                    key=|n| n.clone()
                    children=move |n| view! { <option value=n.clone() selected=move || chosen.get() == n>{n.clone()}</option> }
                />
            </select>
            {move || about().map(|(role, plan)| view! {
                <div id="agent-about" class="agent-about">
                    {role.map(|r| view! { <p id="agent-role"><b>{move || ctx.tr("agent.role")}</b> ": " {r}</p> })}
                    {plan.map(|p| view! { <p id="agent-plan" class="plan"><b>{move || ctx.tr("agent.plan")}</b> ": " {p}</p> })}
                </div>
            })}
            {move || {
                let props = properties();
                (!props.is_empty()).then(|| view! {
                    <div id="agent-props" class="agent-props">
                        <b>{move || ctx.tr("agent.properties")}</b>
                        <ul>
                            {props
                                .into_iter()
                                .map(|(k, v)| view! { <li data-key=k.clone()><span class="key">{k.clone()}</span> ": " <span class="value">{v}</span></li> })
                                .collect_view()}
                        </ul>
                    </div>
                })
            }}
            {ask_in.map(|tree| view! {
                <Show when=move || !no_agents() && view_state.with(|v| !v.agents.is_empty())>
                    <super::notebook::AskBox
                        tree
                        node=Signal::derive(move || view_state.with(|v| v.node))
                        agent=chosen.into()
                    />
                </Show>
            })}
            <div class="scroll memory" node_ref=el hidden=no_agents>
                <ul id="agent-memory">
                    {move || {
                        let m = memory();
                        if m.is_empty() {
                            view! { <li class="muted">{ctx.tr("common.empty")}</li> }.into_any()
                        } else {
                            m.into_iter()
                                .map(|(role, content)| {
                                    let label = format!("[{role}]");
                                    // A trader's exchanges in words; the JSON as sent stays on hover.
                                    let (text, raw) = match crate::model::memory_text(&role, &content) {
                                        Some(text) => (text, Some(content)),
                                        None => (content, None),
                                    };
                                    view! { <li data-role=role title=raw><span class="role">{label}</span> " " <span class="content">{text}</span></li> }
                                })
                                .collect_view()
                                .into_any()
                        }
                    }}
                </ul>
            </div>
        </div>
    }
}
