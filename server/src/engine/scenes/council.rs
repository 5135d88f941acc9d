//! council (upstream `council_scene`): a legislative chamber built on the simple_chat room. Members
//! debate a draft by posting messages; the Host chairs, may fetch a private brief from the LLM,
//! opens a voting round, and closes the session. The round concludes by itself once every member
//! (every agent but the chair — `Host`, or `config.chair`) has voted (spec §1.10.2, §1.6.4).
//!
//! Deliberate differences from upstream:
//! * `complete` (set by `finish_meeting`) lives in the serialised state, so a clone of a finished
//!   meeting stays finished; upstream keeps it as a plain attribute and loses it on clone.
//! * `vote_title` and `past_votes` exist from the start (`null` and `[]`) instead of appearing on the
//!   first round, so every key can be patched. An unset title reads exactly like upstream's missing
//!   key (`(untitled)` in the status, `the draft` in a vote message).
//! * The brief's LLM prompt is our own prose; with the mock LLM the analyst's reply therefore
//!   names a different speaker than upstream's (the built-in scenario never requests a brief).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use simtree_shared::{Ballot, BriefSource};

use super::simple_chat;
use super::{SceneError, SceneRules};
use crate::engine::action::{ActionCtx, ActionKind, ActionResult, ActionSpec, Handled, Outcome, required};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::memory::{Message, Role};
use crate::engine::prompt::SceneText;
use crate::engine::scenes::handle_common;
use crate::engine::world::World;

/// The agent with chair privileges unless the document names another (upstream compares names,
/// not roles).
pub(crate) const HOST: &str = "Host";

/// Scene-specific configuration in a scenario file: `{"chair": name}`, the agent who chairs
/// (opens votes, asks for briefs, never votes; "Host" when absent), named so in the prose.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    chair: Option<String>,
}

/// The tally of one concluded voting round, kept in `past_votes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PastVote {
    title: String,
    yes: usize,
    no: usize,
    abstain: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub(crate) time: i64,
    /// Member name → `yes` | `no` | `abstain`, in voting order.
    #[serde(default)]
    votes: IndexMap<String, String>,
    #[serde(default)]
    voting_started: bool,
    #[serde(default)]
    voting_completed_announced: bool,
    /// `None` until the first round starts (upstream: key absent); `""` after a round concludes.
    #[serde(default)]
    vote_title: Option<String>,
    #[serde(default)]
    past_votes: Vec<PastVote>,
    /// Set by `finish_meeting`; ends the simulation.
    #[serde(default)]
    pub(crate) complete: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Council {
    name: String,
    initial_event: String,
    state: State,
    #[serde(default)]
    config: serde_json::Map<String, serde_json::Value>,
    /// The chair's name (`config.chair`); left out when it is the Host, so stored councils read
    /// the same either way.
    #[serde(default = "host", skip_serializing_if = "is_host")]
    chair: String,
}

fn host() -> String {
    HOST.to_string()
}

fn is_host(name: &String) -> bool {
    name == HOST
}

const COUNCIL_DESCRIPTION: &str = "The room is the chamber of a legislative council: the representatives debate a draft ordinance while the Host chairs the session and keeps order.";

const COUNCIL_GUIDELINES: &str = "\
- Hold on to your own position, but let a genuinely strong argument move you a little; once the round is open, cast your vote.\n\
- Take an active part in the debate, vote when the moment comes, and follow the Host on matters of procedure.\n\
- Do not vote before the Host has explicitly opened the voting round.";

/// The analyst persona of `request_brief`. Kept free of the mock's trigger words so the mock
/// answers it from its plain chat branch, as upstream's prompt does.
const BRIEF_SYSTEM: &str = "You are an impartial policy researcher supporting the members of a legislative chamber. Write a short, neutral, fact-based briefing that helps the debate move on. Answer in plain text only, without JSON or role labels.";

fn brief_user_prompt(desc: &str) -> String {
    format!(
        "Give 5 to 7 short bullet points with concrete facts, examples or precedents. Numbers are welcome; mark estimates as estimates. Stay under about 180 words.\nNeed: {desc}\n"
    )
}

/// What the Host reads when the LLM returns nothing: a checklist to steer the debate.
fn fallback_brief(desc: &str) -> String {
    format!(
        "- Scope: {desc}\n\
         - The central fact or definition at stake\n\
         - A comparable case elsewhere and how it turned out\n\
         - Who gains and who pays\n\
         - Approximate cost or effect (estimate)\n\
         - The main risk and how to contain it\n\
         - One open question for the chamber"
    )
}

impl Council {
    pub(crate) fn new(name: String, initial_event: String, config: Config) -> Self {
        Council {
            name,
            initial_event,
            state: State {
                time: 1080,
                votes: IndexMap::new(),
                voting_started: false,
                voting_completed_announced: false,
                vote_title: None,
                past_votes: Vec::new(),
                complete: false,
            },
            config: Default::default(),
            chair: config.chair.unwrap_or_else(host),
        }
    }

    /// The chair as the prose names them: "the Host" (upstream's words), else their name.
    fn the_chair(&self) -> String {
        if is_host(&self.chair) { "the Host".to_string() } else { self.chair.clone() }
    }

    /// Upper-cased at the start of a sentence.
    fn the_chair_starting(&self) -> String {
        let mut s = self.the_chair();
        if let Some(first) = s.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        s
    }

    fn announce(&self, world: &mut World, text: String) {
        world.broadcast(&SceneEvent::public(text), Some(self.state.time), None);
    }

    fn start_voting(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        if self.state.voting_started {
            let error = "Voting already started.";
            world.feedback(ctx.actor, error);
            return Ok(Outcome::fail(ActionResult::error(error), format!("{name} failed to start voting")));
        }
        let title = required(ctx.call, "title")?.trim().to_string();
        self.state.voting_started = true;
        self.state.vote_title = Some(title.clone());
        self.state.votes.clear();
        self.state.voting_completed_announced = false;
        self.announce(
            world,
            format!(
                "{} has initiated the voting round: {title}. Please cast your votes now.",
                self.the_chair_starting()
            ),
        );
        world.feedback(ctx.actor, &format!("Voting started: {title}"));
        let summary = format!("{name} started the voting: {title}");
        Ok(Outcome::ok(ActionResult::VotingStarted { title }, summary, true))
    }

    fn voting_status(&self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let members = self.members(world);
        if !self.state.voting_started {
            world.feedback(ctx.actor, "Voting has not started.");
            return Ok(Outcome::ok(
                ActionResult::VotingNotStarted { started: false, members: members.len() as u64 },
                "Voting not started",
                false,
            ));
        }
        let (yes, no, abstain) = self.tally();
        let pending_names: Vec<&str> =
            members.iter().map(String::as_str).filter(|m| !self.state.votes.contains_key(*m)).collect();
        let pending = pending_names.len();
        let title = self.state.vote_title.as_deref();
        let mut pending_line = format!("- Pending: {pending}");
        if !pending_names.is_empty() {
            pending_line.push_str(&format!(" ({})", pending_names.join(", ")));
        }
        let lines = [
            format!("Voting status on: {}:", title.unwrap_or("(untitled)")),
            format!("- Members: {}", members.len()),
            format!("- Yes: {yes}, No: {no}, Abstain: {abstain}"),
            pending_line,
        ];
        let result = ActionResult::VotingStatus {
            started: true,
            members: members.len() as u64,
            yes: yes as u64,
            no: no as u64,
            abstain: abstain as u64,
            pending: pending as u64,
            pending_names: pending_names.iter().map(|n| n.to_string()).collect(),
            title: title.map(str::to_string),
        };
        // Upstream formats a missing title with Python's `str(None)`.
        let summary = format!(
            "Voting status on '{}': yes {yes}, no {no}, abstain {abstain}, pending {pending}",
            title.unwrap_or("None")
        );
        world.feedback(ctx.actor, &lines.join("\n"));
        Ok(Outcome::ok(result, summary, false))
    }

    fn request_brief(&self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        if name != self.chair {
            let error = format!("Only {} can use request_brief.", self.the_chair());
            let error = error.as_str();
            world.feedback(ctx.actor, error);
            return Ok(Outcome::fail(ActionResult::error(error), format!("{name} request_brief failed")));
        }
        let desc = required(ctx.call, "desc")?;
        let answer = ctx.llm_reply.as_deref().unwrap_or("").trim();
        let (material, source) = if answer.is_empty() {
            (fallback_brief(desc), BriefSource::Fallback)
        } else {
            (answer.to_string(), BriefSource::Llm)
        };
        world.feedback(ctx.actor, &format!("Brief (private) on '{desc}':\n{material}"));
        let brief = ActionResult::Brief { desc: desc.to_string(), material, source };
        Ok(Outcome::ok(brief, format!("{name} requested a brief: {desc}"), false))
    }

    fn vote(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        let fail = |world: &mut World, error: &str| {
            world.feedback(ctx.actor, error);
            Ok(Outcome::fail(ActionResult::error(error), format!("{name} vote failed")))
        };
        if !self.state.voting_started {
            return fail(world, "Voting has not started yet.");
        }
        if self.state.votes.contains_key(&name) {
            return fail(world, "You have already voted.");
        }
        let Some(ballot) = ctx.call.get("vote").and_then(Ballot::parse).filter(|_| name != self.chair) else {
            return fail(world, "Invalid vote or role.");
        };
        let vote = ballot.as_str();
        self.state.votes.insert(name.clone(), vote.to_string());
        let comment = ctx.call.get("comment").unwrap_or("");
        let title = self.state.vote_title.clone().unwrap_or_else(|| "the draft".to_string());
        let mut message = format!("I vote {vote} on '{title}'.");
        if !comment.is_empty() {
            message.push_str(&format!(" Comment: {comment}"));
        }
        self.deliver_message(&SceneEvent::Message { sender: name.clone(), message }, ctx.actor, world);

        let members = self.members(world).len();
        if members > 0 && self.state.votes.len() >= members && !self.state.voting_completed_announced {
            let (yes, no, abstain) = self.tally();
            // Passing needs a strict majority of all members, abstentions included.
            let verdict = if yes * 2 > members { "passed" } else { "failed" };
            self.announce(
                world,
                format!(
                    "Voting on '{title}' has concluded. It {verdict} with {yes} yes, {no} no, and {abstain} abstain."
                ),
            );
            self.state.past_votes.push(PastVote { title, yes, no, abstain });
            self.state.voting_started = false;
            self.state.voting_completed_announced = true;
            self.state.votes.clear();
            self.state.vote_title = Some(String::new());
        }
        Ok(Outcome::ok(
            ActionResult::Voted { vote: ballot, comment: comment.to_string() },
            format!("{name} voted {vote}"),
            true,
        ))
    }

    fn finish_meeting(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        self.state.complete = true;
        self.announce(world, "The council session is adjourned.".to_string());
        world.feedback(ctx.actor, "Meeting finished.");
        Ok(Outcome::ok(ActionResult::Done {}, format!("{name} finished the meeting"), true))
    }

    /// Counts of (yes, no, abstain) in the current round.
    fn tally(&self) -> (usize, usize, usize) {
        let count = |v: &str| self.state.votes.values().filter(|x| x.as_str() == v).count();
        (count("yes"), count("no"), count("abstain"))
    }

    /// Every agent that may vote (all but the chair), in agent order.
    fn members(&self, world: &World) -> Vec<String> {
        world.agents.iter().filter(|a| a.name != self.chair).map(|a| a.name.clone()).collect()
    }
}

impl SceneRules for Council {
    clock_and_opening!();
    fn text(&self) -> SceneText {
        let chaired = |text: &str| text.replace("the Host", &self.the_chair());
        SceneText {
            chair: (!is_host(&self.chair)).then(|| self.chair.clone()),
            ..SceneText::plain(
                format!("{}\n{}", simple_chat::DESCRIPTION, chaired(COUNCIL_DESCRIPTION)),
                format!("{}\n{}", simple_chat::GUIDELINES, chaired(COUNCIL_GUIDELINES)),
                "",
            )
        }
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![ActionKind::SendMessage, ActionKind::Yield, ActionKind::VotingStatus]
    }
    /// A chair the document names must be one of its agents (a council without a `Host` agent
    /// is upstream's and stays allowed: nobody chairs it).
    fn pre_run(&mut self, world: &mut World) -> Result<(), SceneError> {
        if !is_host(&self.chair) && world.agent_index(&self.chair).is_none() {
            return Err(SceneError::UnknownChair(self.chair.clone()));
        }
        Ok(())
    }
    fn is_complete(&self) -> bool {
        self.state.complete
    }
    fn handle(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        match ctx.kind {
            ActionKind::StartVoting => self.start_voting(ctx, world),
            ActionKind::VotingStatus => self.voting_status(ctx, world),
            ActionKind::RequestBrief => self.request_brief(ctx, world),
            ActionKind::Vote => self.vote(ctx, world),
            ActionKind::FinishMeeting => self.finish_meeting(ctx, world),
            _ => handle_common(self, ctx, world),
        }
    }
    /// The brief's two-message request, only for the Host with a `desc` (anyone else fails
    /// without an LLM call; a missing `desc` is an error before the call, as upstream).
    fn llm_request(&self, ctx: &ActionCtx, world: &World) -> Option<Vec<Message>> {
        if ctx.kind != ActionKind::RequestBrief || ctx.actor_name(world) != self.chair {
            return None;
        }
        let desc = ctx.call.get("desc")?;
        Some(vec![Message::new(Role::System, BRIEF_SYSTEM), Message::new(Role::User, brief_user_prompt(desc))])
    }
}

/// The prompt text of the actions this scene adds, for the catalogue in `scenes/mod.rs`.
pub(crate) const ACTIONS: &[(ActionKind, ActionSpec)] = &[
    (
        ActionKind::StartVoting,
        ActionSpec {
            desc: "(Host) open a voting round on a titled question",
            instruction: "- To open a voting round with a title:\n<Action name=\"start_voting\"><title>[short subject]</title></Action>\n",
        },
    ),
    (
        ActionKind::FinishMeeting,
        ActionSpec {
            desc: "(Host) close the council session; this ends the scene",
            instruction: "- To close the session (Host only):\n<Action name=\"finish_meeting\" />\n",
        },
    ),
    (
        ActionKind::RequestBrief,
        ActionSpec {
            desc: "(Host) get a short neutral briefing from an analyst when the debate stalls or facts are missing; say in 'desc' what topic and angle you need",
            instruction: "- To ask for a private briefing (Host only):\n<Action name=\"request_brief\"><desc>[topic and focus]</desc></Action>\n",
        },
    ),
    (
        ActionKind::VotingStatus,
        ActionSpec {
            desc: "see how the current voting round stands: counts so far and who has not voted",
            instruction: "- To check the voting round:\n<Action name=\"voting_status\" />\n",
        },
    ),
    (
        ActionKind::Vote,
        ActionSpec {
            desc: "(member) cast your vote, optionally with a short comment",
            instruction: "- To vote once the round is open:\n<Action name=\"vote\"><vote>yes|no|abstain</vote><comment>[optional]</comment></Action>\n",
        },
    ),
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::event::EventType;
    use crate::engine::parse::ActionCall;
    use crate::engine::scenes::testing::{mock_run, summaries};
    use crate::engine::scenes::{Refused, Scene, check_refusal};
    use crate::engine::simulator::{BuildError, Simulator};
    use crate::scenario::Scenario;

    const MEMBERS: [&str; 3] = ["Rep. A", "Rep. B", "Rep. C"];

    /// `chair` and the three members in session in `council`, its initial broadcasts dropped.
    fn seated(chair: Agent, council: Council) -> Result<(Council, World), BuildError> {
        let mut agents = vec![chair];
        agents.extend(MEMBERS.iter().map(|n| Agent::new(*n, vec![ActionKind::Vote])));
        let sim = Simulator::in_order(agents, Scene::Council(council))?;
        let Scene::Council(council) = sim.scene else { unreachable!() };
        let mut world = sim.world;
        world.pending.clear();
        Ok((council, world))
    }

    fn setup() -> (Council, World) {
        let host = Agent::new(HOST, vec![ActionKind::StartVoting]);
        seated(host, Council::new("council".into(), "Draft.".into(), Config::default())).unwrap()
    }

    fn act(c: &mut Council, w: &mut World, actor: &str, call: ActionCall) -> Handled {
        crate::engine::scenes::act_as(c, w, actor, &call)
    }

    /// A jury chaired by its foreperson (`config.chair`) and the three members.
    fn chaired(chair: &str) -> Result<(Council, World), BuildError> {
        let foreperson = Agent::new("Foreperson", vec![ActionKind::StartVoting, ActionKind::RequestBrief]);
        let config: Config = serde_json::from_value(json!({"chair": chair})).unwrap();
        seated(foreperson, Council::new("jury".into(), "Evidence.".into(), config))
    }

    #[test]
    fn a_document_names_its_chair_who_opens_the_vote_never_votes_and_is_named_in_the_prose() {
        let (mut c, mut w) = chaired("Foreperson").unwrap();
        let text = c.text();
        assert!(text.description.contains("while Foreperson chairs the session"), "{}", text.description);
        assert!(text.guidelines.contains("before Foreperson has explicitly opened"), "{}", text.guidelines);
        assert!(!text.description.contains("Host") && !text.guidelines.contains("Host"));
        let o = act(&mut c, &mut w, "Foreperson", ActionCall::new("start_voting").with("title", "Guilty?")).unwrap();
        assert!(o.success);
        assert_eq!(
            drain(&mut w).1,
            ["Public Event: Foreperson has initiated the voting round: Guilty?. Please cast your votes now."]
        );
        // The chair does not vote, and the round ends when the three members have.
        let refused = act(&mut c, &mut w, "Foreperson", ActionCall::new("vote").with("vote", "yes")).unwrap();
        assert!(!refused.success);
        for m in MEMBERS {
            act(&mut c, &mut w, m, ActionCall::new("vote").with("vote", "no")).unwrap();
        }
        assert_eq!(c.state.past_votes.len(), 1, "{:?}", c.state);
        drain(&mut w);
        // Only the chair may ask for a brief; the refusal names them.
        act(&mut c, &mut w, "Rep. A", ActionCall::new("request_brief").with("desc", "x")).unwrap();
        assert_eq!(said_to(&drain(&mut w).0, "Rep. A"), ["Only Foreperson can use request_brief."]);
        // Stored with its chair; a stored council without one is chaired by the Host.
        let stored = serde_json::to_value(&c).unwrap();
        assert_eq!(stored["chair"], "Foreperson");
        let host = Council::new("c".into(), "e".into(), Config::default());
        assert!(serde_json::to_value(&host).unwrap().get("chair").is_none());
        let mut old = stored.clone();
        old.as_object_mut().unwrap().remove("chair");
        assert_eq!(serde_json::from_value::<Council>(old).unwrap().chair, HOST);
    }

    #[test]
    fn a_chair_who_is_not_an_agent_is_refused() {
        let Err(e) = chaired("Judge") else { panic!("a chair who is not an agent was accepted") };
        assert_eq!(e.to_string(), "scene.config.chair: 'Judge' is not an agent of this scene");
    }

    /// Feedback lines each agent received since the last call, plus the queued broadcast texts.
    fn drain(w: &mut World) -> (Vec<(String, String)>, Vec<String>) {
        w.flush_pending();
        let mut deltas = Vec::new();
        let mut broadcasts = Vec::new();
        for e in w.take_out() {
            match e.kind {
                EventType::AgentCtxDelta => deltas.push((
                    e.data["agent"].as_str().unwrap().to_string(),
                    e.data["content"].as_str().unwrap().to_string(),
                )),
                EventType::SystemBroadcast => broadcasts.push(e.data["text"].as_str().unwrap().to_string()),
                _ => {}
            }
        }
        (deltas, broadcasts)
    }

    fn said_to(deltas: &[(String, String)], agent: &str) -> Vec<String> {
        deltas.iter().filter(|(a, _)| a == agent).map(|(_, c)| c.clone()).collect()
    }

    fn start(c: &mut Council, w: &mut World, title: &str) -> Outcome {
        act(c, w, HOST, ActionCall::new("start_voting").with("title", title)).unwrap()
    }

    /// `who` tries `call`, which the council refuses with `summary`, telling `who` alone `why`
    /// (the result's error too), changing nothing ([`check_refusal`]).
    fn refused(c: &mut Council, w: &mut World, who: &str, call: ActionCall, summary: &str, why: &str) {
        check_refusal(c, w, who, &call, Refused::error(why, summary, why));
    }

    /// Each row `(who, ballot, why)`: `who` votes `ballot` (none: no `vote` field), which the
    /// council refuses as [`refused`] says, with the summary "{who} vote failed".
    fn bad_votes(c: &mut Council, w: &mut World, rows: &[(&str, Option<&str>, &str)]) {
        for &(who, ballot, why) in rows {
            let call = ballot.map_or(ActionCall::new("vote"), |b| ActionCall::new("vote").with("vote", b));
            refused(c, w, who, call, &format!("{who} vote failed"), why);
        }
    }

    fn vote(c: &mut Council, w: &mut World, who: &str, v: &str) -> Outcome {
        act(c, w, who, ActionCall::new("vote").with("vote", v)).unwrap()
    }

    #[test]
    fn start_voting_announces_and_refuses_a_second_start() {
        let (mut c, mut w) = setup();
        let o = start(&mut c, &mut w, "  Congestion pilot ");
        assert!(o.success && o.pass_control);
        assert_eq!(o.result_json(), json!({"title": "Congestion pilot"}));
        assert_eq!(o.summary.as_deref(), Some("Host started the voting: Congestion pilot"));
        let (d, b) = drain(&mut w);
        assert_eq!(
            b,
            ["Public Event: The Host has initiated the voting round: Congestion pilot. Please cast your votes now."]
        );
        // A public event reaches everyone, the Host included, before the private confirmation.
        assert_eq!(
            said_to(&d, HOST),
            [
                "[18:00] Public Event: The Host has initiated the voting round: Congestion pilot. Please cast your votes now.",
                "Voting started: Congestion pilot"
            ]
        );
        assert_eq!(
            said_to(&d, "Rep. A"),
            [
                "[18:00] Public Event: The Host has initiated the voting round: Congestion pilot. Please cast your votes now."
            ]
        );
        assert!(c.state.voting_started);
        assert_eq!(c.state.vote_title.as_deref(), Some("Congestion pilot"));

        let again = ActionCall::new("start_voting").with("title", "Other");
        refused(&mut c, &mut w, HOST, again, "Host failed to start voting", "Voting already started.");
        assert_eq!(c.state.vote_title.as_deref(), Some("Congestion pilot"));
    }

    #[test]
    fn start_voting_without_a_title_is_an_error() {
        let (mut c, mut w) = setup();
        assert!(act(&mut c, &mut w, HOST, ActionCall::new("start_voting")).is_err());
        assert!(!c.state.voting_started);
    }

    #[test]
    fn voting_status_before_and_during_a_round() {
        let (mut c, mut w) = setup();
        let o = act(&mut c, &mut w, "Rep. A", ActionCall::new("voting_status")).unwrap();
        assert!(o.success && !o.pass_control);
        assert_eq!(o.result_json(), json!({"started": false, "members": 3}));
        assert_eq!(o.summary.as_deref(), Some("Voting not started"));
        assert_eq!(said_to(&drain(&mut w).0, "Rep. A"), ["Voting has not started."]);

        start(&mut c, &mut w, "Pilot");
        vote(&mut c, &mut w, "Rep. B", "no");
        drain(&mut w);
        let o = act(&mut c, &mut w, "Rep. A", ActionCall::new("voting_status")).unwrap();
        assert_eq!(
            said_to(&drain(&mut w).0, "Rep. A"),
            ["Voting status on: Pilot:\n- Members: 3\n- Yes: 0, No: 1, Abstain: 0\n- Pending: 2 (Rep. A, Rep. C)"]
        );
        assert_eq!(
            o.result_json(),
            json!({"started": true, "members": 3, "yes": 0, "no": 1, "abstain": 0, "pending": 2,
                   "pending_names": ["Rep. A", "Rep. C"], "title": "Pilot"})
        );
        assert_eq!(o.summary.as_deref(), Some("Voting status on 'Pilot': yes 0, no 1, abstain 0, pending 2"));

        vote(&mut c, &mut w, "Rep. A", "yes");
        drain(&mut w);
        // A started round with no title reads "(untitled)" only when the title was never set.
        c.state.vote_title = None;
        act(&mut c, &mut w, HOST, ActionCall::new("voting_status")).unwrap();
        assert_eq!(
            said_to(&drain(&mut w).0, HOST),
            ["Voting status on: (untitled):\n- Members: 3\n- Yes: 1, No: 1, Abstain: 0\n- Pending: 1 (Rep. C)"]
        );
    }

    #[test]
    fn vote_validation() {
        let (mut c, mut w) = setup();
        bad_votes(&mut c, &mut w, &[("Rep. A", Some("yes"), "Voting has not started yet.")]);

        start(&mut c, &mut w, "Pilot");
        drain(&mut w);
        #[rustfmt::skip]
        let rows = [
            ("Rep. A", Some("maybe"), "Invalid vote or role."),
            ("Rep. A", Some("Yes"), "Invalid vote or role."),
            ("Rep. A", Some(""), "Invalid vote or role."),
            ("Rep. A", None, "Invalid vote or role."),
            (HOST, Some("yes"), "Invalid vote or role."),
        ];
        bad_votes(&mut c, &mut w, &rows);
        assert!(c.state.votes.is_empty());

        let o = act(&mut c, &mut w, "Rep. A", ActionCall::new("vote").with("vote", "yes").with("comment", "Good plan"))
            .unwrap();
        assert!(o.success && o.pass_control);
        assert_eq!(o.result_json(), json!({"vote": "yes", "comment": "Good plan"}));
        assert_eq!(o.summary.as_deref(), Some("Rep. A voted yes"));
        let (d, b) = drain(&mut w);
        assert_eq!(said_to(&d, "Rep. A"), ["[18:00] [Message] Rep. A: I vote yes on 'Pilot'. Comment: Good plan"]);
        assert_eq!(said_to(&d, "Rep. B"), ["[18:00] [Message] Rep. A: I vote yes on 'Pilot'. Comment: Good plan"]);
        assert_eq!(b, ["[Message] Rep. A: I vote yes on 'Pilot'. Comment: Good plan"]);

        bad_votes(&mut c, &mut w, &[("Rep. A", Some("no"), "You have already voted.")]);
        assert_eq!(c.state.votes.get("Rep. A").map(String::as_str), Some("yes"));
    }

    #[test]
    fn the_last_vote_concludes_the_round_passed() {
        let (mut c, mut w) = setup();
        start(&mut c, &mut w, "Pilot");
        vote(&mut c, &mut w, "Rep. A", "yes");
        vote(&mut c, &mut w, "Rep. B", "yes");
        drain(&mut w);
        let o = vote(&mut c, &mut w, "Rep. C", "abstain");
        assert_eq!(o.result_json(), json!({"vote": "abstain", "comment": ""}));
        let (d, b) = drain(&mut w);
        assert_eq!(
            b,
            [
                "[Message] Rep. C: I vote abstain on 'Pilot'.",
                "Public Event: Voting on 'Pilot' has concluded. It passed with 2 yes, 0 no, and 1 abstain."
            ]
        );
        assert_eq!(
            said_to(&d, HOST),
            [
                "[18:00] [Message] Rep. C: I vote abstain on 'Pilot'.",
                "[18:00] Public Event: Voting on 'Pilot' has concluded. It passed with 2 yes, 0 no, and 1 abstain."
            ]
        );
        assert_eq!(c.state.past_votes, [PastVote { title: "Pilot".into(), yes: 2, no: 0, abstain: 1 }]);
        assert!(!c.state.voting_started && c.state.voting_completed_announced);
        assert!(c.state.votes.is_empty());
        assert_eq!(c.state.vote_title.as_deref(), Some(""));
        // The next round starts clean and appends to the history.
        start(&mut c, &mut w, "Second");
        assert!(!c.state.voting_completed_announced);
    }

    #[test]
    fn a_tie_or_abstentions_fail_the_round() {
        let (mut c, mut w) = setup();
        start(&mut c, &mut w, "Pilot");
        vote(&mut c, &mut w, "Rep. A", "yes");
        vote(&mut c, &mut w, "Rep. B", "no");
        vote(&mut c, &mut w, "Rep. C", "abstain");
        let (_, b) = drain(&mut w);
        assert_eq!(
            b.last().map(String::as_str),
            Some("Public Event: Voting on 'Pilot' has concluded. It failed with 1 yes, 1 no, and 1 abstain.")
        );
        start(&mut c, &mut w, "Again");
        for m in MEMBERS {
            vote(&mut c, &mut w, m, "no");
        }
        assert_eq!(c.state.past_votes.len(), 2);
        assert_eq!(c.state.past_votes[1], PastVote { title: "Again".into(), yes: 0, no: 3, abstain: 0 });
        // Voting is closed again.
        assert_eq!(
            vote(&mut c, &mut w, "Rep. A", "yes").result_json(),
            json!({"error": "Voting has not started yet."})
        );
    }

    #[test]
    fn request_brief_is_for_the_host_and_falls_back_on_an_empty_answer() {
        let (mut c, mut w) = setup();
        let call = ActionCall::new("request_brief").with("desc", "pilot costs");
        let member = w.agent_index("Rep. A").unwrap();
        let ctx = ActionCtx { call: &call, kind: ActionKind::RequestBrief, actor: member, llm_reply: None };
        assert!(c.llm_request(&ctx, &w).is_none(), "no LLM call for members");
        let (summary, told) = ("Rep. A request_brief failed", "Only the Host can use request_brief.");
        refused(&mut c, &mut w, "Rep. A", call.clone(), summary, told);

        let host = w.agent_index(HOST).unwrap();
        let mut ctx = ActionCtx { call: &call, kind: ActionKind::RequestBrief, actor: host, llm_reply: None };
        let req = c.llm_request(&ctx, &w).unwrap();
        assert_eq!(req.len(), 2);
        assert_eq!((req[0].role, req[1].role), (Role::System, Role::User));
        assert!(req[0].content.starts_with("You are "));
        assert!(req[1].content.contains("Need: pilot costs\n"));
        let low = format!("{}{}", req[0].content, req[1].content).to_lowercase();
        for word in ["vote", "voting", "werewolf", "landlord", "virtual village"] {
            assert!(!low.contains(word), "{word}");
        }

        ctx.llm_reply = Some("  \n ".into());
        let o = c.handle(&ctx, &mut w).unwrap();
        assert!(o.success && !o.pass_control);
        let material = o.result_json()["material"].as_str().unwrap().to_string();
        assert_eq!(o.result_json()["source"], "fallback");
        assert_eq!(o.result_json()["desc"], "pilot costs");
        assert!(material.starts_with("- Scope: pilot costs\n"));
        assert_eq!(material.lines().count(), 7);
        assert!(material.lines().all(|l| l.starts_with("- ")));
        assert_eq!(o.summary.as_deref(), Some("Host requested a brief: pilot costs"));
        let (d, b) = drain(&mut w);
        assert!(b.is_empty(), "a brief is private");
        assert_eq!(said_to(&d, HOST), [format!("Brief (private) on 'pilot costs':\n{material}")]);

        ctx.llm_reply = Some("\n- Fact one\n- Fact two \n".into());
        let o = c.handle(&ctx, &mut w).unwrap();
        assert_eq!(
            o.result_json(),
            json!({"desc": "pilot costs", "material": "- Fact one\n- Fact two", "source": "llm"})
        );
        assert_eq!(said_to(&drain(&mut w).0, HOST), ["Brief (private) on 'pilot costs':\n- Fact one\n- Fact two"]);

        let bare = ActionCall::new("request_brief");
        let ctx = ActionCtx { call: &bare, kind: ActionKind::RequestBrief, actor: host, llm_reply: None };
        assert!(c.llm_request(&ctx, &w).is_none());
        assert!(c.handle(&ctx, &mut w).is_err(), "desc is required");
    }

    #[test]
    fn the_simulator_passes_the_llm_answer_to_request_brief() {
        let host = Agent::new(HOST, vec![ActionKind::RequestBrief]);
        let scene = Scene::Council(Council::new("c".into(), "Draft.".into(), Config::default()));
        let mut sim = Simulator::in_order(vec![host, Agent::new("Rep. A", vec![])], scene).unwrap();
        // Script the host: request a brief, then yield.
        struct Script;
        impl crate::llm::LlmClient for Script {
            fn chat<'a>(
                &'a self,
                m: &'a [Message],
                _: &'a mut crate::llm::LlmState,
            ) -> crate::llm::BoxFuture<'a, Result<String, crate::llm::LlmError>> {
                let reply = if m[0].content.starts_with("You are an impartial") {
                    "- Costs fell in Oslo.".to_string()
                } else if m.iter().any(|x| x.content.contains("Brief (private)")) {
                    "--- Action ---\n<Action name=\"yield\" />".to_string()
                } else {
                    "--- Action ---\n<Action name=\"request_brief\"><desc>costs</desc></Action>".to_string()
                };
                Box::pin(async move { Ok(reply) })
            }
        }
        let (r, events) = sim.run_blocking(1, &Script);
        r.unwrap();
        let end = events.iter().find(|e| e.kind == EventType::ActionEnd).unwrap();
        assert_eq!(end.data["result"], json!({"desc": "costs", "material": "- Costs fell in Oslo.", "source": "llm"}));
    }

    #[test]
    fn finish_meeting_completes_the_scene_and_survives_cloning() {
        let (mut c, mut w) = setup();
        assert!(!c.is_complete());
        let o = act(&mut c, &mut w, "Rep. B", ActionCall::new("finish_meeting")).unwrap();
        assert!(o.success && o.pass_control);
        assert_eq!(o.result_json(), json!({}));
        assert_eq!(o.summary.as_deref(), Some("Rep. B finished the meeting"));
        let (d, b) = drain(&mut w);
        assert_eq!(b, ["Public Event: The council session is adjourned."]);
        assert_eq!(
            said_to(&d, "Rep. B"),
            ["[18:00] Public Event: The council session is adjourned.", "Meeting finished."]
        );
        assert_eq!(said_to(&d, HOST), ["[18:00] Public Event: The council session is adjourned."]);
        assert!(c.is_complete());
        // A clone goes through JSON (SimTree export/import, patch_state) and keeps the flag.
        let scene: Scene = serde_json::from_value(serde_json::to_value(Scene::Council(c)).unwrap()).unwrap();
        assert!(scene.rules().is_complete());
        assert_eq!(scene.state_json()["complete"], json!(true));
    }

    #[test]
    fn a_finished_meeting_stops_the_run() {
        let host = Agent::new(HOST, vec![ActionKind::FinishMeeting]);
        let scene = Scene::Council(Council::new("c".into(), "Draft.".into(), Config::default()));
        let mut sim = Simulator::in_order(vec![host], scene).unwrap();
        struct Finish;
        impl crate::llm::LlmClient for Finish {
            fn chat<'a>(
                &'a self,
                _: &'a [Message],
                _: &'a mut crate::llm::LlmState,
            ) -> crate::llm::BoxFuture<'a, Result<String, crate::llm::LlmError>> {
                Box::pin(async { Ok("--- Action ---\n<Action name=\"finish_meeting\" />".to_string()) })
            }
        }
        let (r, _) = sim.run_blocking(10, &Finish);
        let r = r.unwrap();
        assert!(r.complete);
        assert_eq!(r.turns, 1);
        let mut fork = sim.fork();
        let (r, _) = fork.run_blocking(10, &Finish);
        assert_eq!(r.unwrap().turns, 0, "the clone is finished too");
    }

    #[test]
    fn state_round_trips_and_patches() {
        let (mut c, mut w) = setup();
        start(&mut c, &mut w, "Pilot");
        vote(&mut c, &mut w, "Rep. A", "yes");
        let mut scene = Scene::Council(c);
        let json = serde_json::to_value(&scene).unwrap();
        assert_eq!(json["type"], "council_scene");
        assert_eq!(json["config"], json!({}));
        let keys: Vec<&str> = json["state"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["time", "votes", "voting_started", "voting_completed_announced", "vote_title", "past_votes", "complete"]
        );
        let back: Scene = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        let patch = json!({"votes": {}, "past_votes": [{"title": "t", "yes": 1, "no": 0, "abstain": 0}]});
        scene.patch_state(patch.as_object().unwrap()).unwrap();
        assert_eq!(scene.state_json()["votes"], json!({}));
        assert!(scene.patch_state(json!({"voting_started": "yes"}).as_object().unwrap()).is_err());
    }

    #[test]
    fn prompt_text_keeps_the_vote_trigger_in_the_guidelines_only() {
        let c = Council::new("c".into(), "x".into(), Config::default());
        let t = c.text();
        assert!(t.guidelines.starts_with(simple_chat::GUIDELINES));
        assert_eq!(t.guidelines.lines().count(), simple_chat::GUIDELINES.lines().count() + 3);
        assert!(t.guidelines.contains("vote"));
        assert!(t.description.starts_with(simple_chat::DESCRIPTION));
        let desc = t.description.to_lowercase();
        for word in ["vote", "voting", "werewolf", "landlord", "virtual village"] {
            assert!(!desc.contains(word), "{word}");
        }
        for kind in [ActionKind::FinishMeeting, ActionKind::RequestBrief] {
            let text = format!(
                "{} {}",
                crate::engine::scenes::action_spec(kind).desc,
                crate::engine::scenes::action_spec(kind).instruction
            )
            .to_lowercase();
            assert!(!text.contains("vote") && !text.contains("voting"), "{}", kind.name());
        }
        assert_eq!(
            c.scene_actions(&Agent::new("x", vec![])),
            [ActionKind::SendMessage, ActionKind::Yield, ActionKind::VotingStatus]
        );
    }

    #[test]
    fn scenario_file_builds_the_upstream_roster() {
        let s = Scenario::shipped("council");
        assert_eq!(s.default_turns, 120);
        let sim = s.build(None).unwrap();
        let names = sim.world.names();
        assert_eq!(names, ["Host", "Rep. Chen Wei", "Rep. Li Na", "Rep. Zhang Rui", "Rep. Wang Mei", "Rep. Qiao Jun"]);
        use ActionKind::*;
        assert_eq!(
            sim.world.agents[0].action_space,
            [StartVoting, FinishMeeting, RequestBrief, SendMessage, Yield, VotingStatus]
        );
        assert_eq!(sim.world.agents[1].action_space, [Vote, SendMessage, Yield, VotingStatus]);
        assert_eq!(sim.world.agents[5].action_space, [SendMessage, Yield, Vote, VotingStatus]);
        let first = sim.world.agents[0].short_memory.first().unwrap().content.to_string();
        assert!(first.starts_with(
            "[18:00] Public Event: The chamber will now consider the following draft for debate and vote:\n"
        ));
        assert!(first.ends_with(
            "\n[18:00] Public Event: Participants: Host, Rep. Chen Wei, Rep. Li Na, Rep. Zhang Rui, Rep. Wang Mei, Rep. Qiao Jun"
        ));
    }

    #[test]
    fn mock_run_of_the_council_scenario() {
        // The Host greets once, the first "Rep" speaks once, everything else yields.
        let (sim, events) = mock_run("council", 30);
        let said = summaries(&events);
        assert_eq!(
            said[..4],
            [
                "Host: Good morning, council.",
                "Host yielded the floor",
                "Rep. Chen Wei: I support moving forward.",
                "Rep. Chen Wei yielded the floor"
            ]
        );
        assert!(said[4..].iter().all(|s| s.ends_with(" yielded the floor")));
        assert_eq!(sim.scene.rules().time(), 1080 + 30 * 3);
    }
}
