//! What a social scenario document may say about its scene: the scene types
//! ([`SceneKind`]), every action the engine knows ([`ActionKind`]), which actions each scene
//! type offers ([`SceneKind::catalogue`]), and the prose a document may give its scene in place
//! of the type's own ([`SceneProse`]).
//!
//! The server checks documents against these lists and the New page offers them, so both read
//! them from here. The prompt text of each action and each scene's default prose stay with the
//! scene in the engine; `GET /api/scene-types` ([`SceneTypeInfo`]) serves them.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

macro_rules! action_kinds {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// Every action the engine knows, by upstream's registry names. Which of them a scene
        /// accepts is its [`SceneKind::catalogue`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum ActionKind { $($variant),* }

        impl ActionKind {
            pub const ALL: &'static [ActionKind] = &[$(ActionKind::$variant),*];

            /// The registry name (`move_to_location`), as prompts, responses and scenarios spell it.
            pub fn name(self) -> &'static str {
                match self { $(ActionKind::$variant => $name),* }
            }
        }
    };
}

action_kinds! {
    Speak => "speak",
    SendMessage => "send_message",
    TalkTo => "talk_to",
    Yield => "yield",
    MoveToLocation => "move_to_location",
    LookAround => "look_around",
    GatherResource => "gather_resource",
    Rest => "rest",
    StartVoting => "start_voting",
    FinishMeeting => "finish_meeting",
    RequestBrief => "request_brief",
    VotingStatus => "voting_status",
    Vote => "vote",
    WebSearch => "web_search",
    ViewPage => "view_page",
    ScheduleOrder => "schedule_order",
    VoteLynch => "vote_lynch",
    NightKill => "night_kill",
    Inspect => "inspect",
    WitchSave => "witch_save",
    WitchPoison => "witch_poison",
    OpenVoting => "open_voting",
    CloseVoting => "close_voting",
    CallLandlord => "call_landlord",
    RobLandlord => "rob_landlord",
    Pass => "pass",
    PlayCards => "play_cards",
    Double => "double",
    NoDouble => "no_double",
}

impl ActionKind {
    /// Looks an action up by its registry name.
    pub fn from_name(name: &str) -> Option<ActionKind> {
        ActionKind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The actions every scene type offers: talking, the web, yielding, scheduling who acts next.
pub const COMMON_ACTIONS: &[ActionKind] = &[
    ActionKind::Speak,
    ActionKind::SendMessage,
    ActionKind::TalkTo,
    ActionKind::Yield,
    ActionKind::WebSearch,
    ActionKind::ViewPage,
    ActionKind::ScheduleOrder,
];

/// A social scenario's scene type (`scene.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SceneKind {
    SimpleChat,
    /// Upstream's alias of simple_chat (a guided emotional dialogue); builds a simple_chat scene.
    EmotionalConflict,
    Council,
    Werewolf,
    Landlord,
    Village,
    /// A scene the document defines: its roles, actions, phases and outcomes are the `config`
    /// ([`crate::custom::CustomScene`]).
    Custom,
}

impl SceneKind {
    /// The types a new document is offered (the alias `emotional_conflict` is read, not offered).
    pub const OFFERED: [SceneKind; 6] = [
        SceneKind::SimpleChat,
        SceneKind::Council,
        SceneKind::Werewolf,
        SceneKind::Landlord,
        SceneKind::Village,
        SceneKind::Custom,
    ];

    /// What a scene of this type is, in one paragraph, for someone choosing a type.
    pub fn summary(self) -> &'static str {
        match self {
            SceneKind::SimpleChat | SceneKind::EmotionalConflict => {
                "A free conversation: agents send messages to everyone or to one another until the turns run out."
            }
            SceneKind::Council => {
                "A legislative council: representatives debate a draft while the agent named Host chairs, opens voting rounds and closes the session."
            }
            SceneKind::Werewolf => {
                "The werewolf party game: night kills, a seer and a witch, day discussion and lynch votes, run by moderators, until one side wins."
            }
            SceneKind::Landlord => {
                "Dou dizhu for exactly four players: bidding for the landlord, doubling, then playing card combinations until a hand is empty."
            }
            SceneKind::Village => {
                "A tile map with named places: agents move, look around, gather resources, rest and talk to those within range."
            }
            SceneKind::Custom => {
                "A scene the document defines in `config`: its setting, roles, variables, actions with parameters and effects, phases, tallies and outcomes (see docs/scenarios.md, \"A custom scene\")."
            }
        }
    }

    /// The name a document spells (`simple_chat`).
    pub fn name(self) -> &'static str {
        match self {
            SceneKind::SimpleChat => "simple_chat",
            SceneKind::EmotionalConflict => "emotional_conflict",
            SceneKind::Council => "council",
            SceneKind::Werewolf => "werewolf",
            SceneKind::Landlord => "landlord",
            SceneKind::Village => "village",
            SceneKind::Custom => "custom",
        }
    }

    pub fn from_name(name: &str) -> Option<SceneKind> {
        [SceneKind::EmotionalConflict, SceneKind::Custom]
            .into_iter()
            .chain(SceneKind::OFFERED)
            .find(|k| k.name() == name)
    }

    /// The actions this scene type adds to the common ones.
    pub fn own_actions(self) -> &'static [ActionKind] {
        use ActionKind::*;
        match self {
            SceneKind::SimpleChat | SceneKind::EmotionalConflict | SceneKind::Custom => &[],
            SceneKind::Council => &[StartVoting, FinishMeeting, RequestBrief, VotingStatus, Vote],
            SceneKind::Werewolf => &[VoteLynch, NightKill, Inspect, WitchSave, WitchPoison, OpenVoting, CloseVoting],
            SceneKind::Landlord => &[CallLandlord, RobLandlord, Pass, PlayCards, Double, NoDouble],
            SceneKind::Village => &[MoveToLocation, LookAround, GatherResource, Rest],
        }
    }

    /// Every action an agent of this scene type may hold: the common ones, then the scene's own.
    /// A custom scene's actions are its document's; of the registry it offers only `yield`.
    pub fn catalogue(self) -> impl Iterator<Item = ActionKind> {
        let common: &[ActionKind] = match self {
            SceneKind::Custom => &[ActionKind::Yield],
            _ => COMMON_ACTIONS,
        };
        common.iter().chain(self.own_actions()).copied()
    }

    pub fn offers(self, action: ActionKind) -> bool {
        self.catalogue().any(|a| a == action)
    }
}

impl std::fmt::Display for SceneKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The most characters one piece of prose may have.
pub const MAX_PROSE_CHARS: usize = 20_000;

/// A document's own prose for its scene (`scene.prose`), each part in place of the scene type's
/// default; a part left out keeps the default, so a document without `prose` reads as before.
/// Nothing here names a scene type: a scene a user defines will carry its prose in this shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SceneProse {
    /// What the place is and who is in it (the prompt's scene description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How to behave there (the rules the prompt states after the description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    /// Worked examples shown after the action list (only the village has default ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<String>,
    /// Per action (by registry name): its line in the action list and its usage text.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub actions: IndexMap<String, ActionProse>,
}

/// An action's prose: its one line under "Available Actions" and its usage text (how to write
/// the action, with an XML example) under "Usage".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ActionProse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<String>,
}

/// Why a document's prose was refused; the message starts with the path inside `scene.prose`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProseError {
    #[error("prose.actions.{action}: {action} is not an action of the {scene} scene (its actions: {})", list(*scene))]
    ForeignAction { scene: SceneKind, action: String },
    #[error("prose.{path}: {chars} characters; at most {MAX_PROSE_CHARS}")]
    TooLong { path: String, chars: usize },
    /// An action's description is its one line in the action list.
    #[error("prose.actions.{0}.description: must be one line (it is the action's line in the list)")]
    MultiLine(String),
}

/// A scene type's actions as a message lists them.
pub fn list(scene: SceneKind) -> String {
    scene.catalogue().map(ActionKind::name).collect::<Vec<_>>().join(", ")
}

impl SceneProse {
    pub fn is_empty(&self) -> bool {
        *self == SceneProse::default()
    }

    /// This prose with each part `given` gives in its place (per action, per field).
    pub fn merged(mut self, given: &SceneProse) -> SceneProse {
        let take = |own: &mut Option<String>, new: &Option<String>| {
            if new.is_some() {
                own.clone_from(new);
            }
        };
        take(&mut self.description, &given.description);
        take(&mut self.rules, &given.rules);
        take(&mut self.examples, &given.examples);
        for (name, prose) in &given.actions {
            let own = self.actions.entry(name.clone()).or_default();
            take(&mut own.description, &prose.description);
            take(&mut own.usage, &prose.usage);
        }
        self
    }

    /// The document's prose for `action`, if it gives any.
    pub fn action(&self, action: ActionKind) -> Option<&ActionProse> {
        self.actions.get(action.name())
    }

    /// Checks that every action named is one of `scene`'s and that no part is too long.
    pub fn check(&self, scene: SceneKind) -> Result<(), ProseError> {
        let long = |path: String, text: &Option<String>| match text.as_deref().map(|t| t.chars().count()) {
            Some(chars) if chars > MAX_PROSE_CHARS => Err(ProseError::TooLong { path, chars }),
            _ => Ok(()),
        };
        long("description".into(), &self.description)?;
        long("rules".into(), &self.rules)?;
        long("examples".into(), &self.examples)?;
        for (name, prose) in &self.actions {
            if !ActionKind::from_name(name).is_some_and(|a| scene.offers(a)) {
                return Err(ProseError::ForeignAction { scene, action: name.clone() });
            }
            long(format!("actions.{name}.description"), &prose.description)?;
            if prose.description.as_deref().is_some_and(|d| d.contains(['\n', '\r'])) {
                return Err(ProseError::MultiLine(name.clone()));
            }
            long(format!("actions.{name}.usage"), &prose.usage)?;
        }
        Ok(())
    }
}

/// `GET /api/scene-types`: one scene type, its actions and its default prose, as a document's
/// `scene.prose` would replace them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SceneTypeInfo {
    #[serde(rename = "type")]
    pub kind: SceneKind,
    /// What a scene of this type is ([`SceneKind::summary`]).
    pub summary: String,
    /// Every action an agent of this type may hold, the common ones first, with default prose.
    pub actions: Vec<ActionInfo>,
    /// The type's default description, rules and examples (for its default `config`: a village's
    /// description names its map size, a landlord's rules its number of decks). A custom scene
    /// has none: its `config.setting` and `config.rules` are its description and rules.
    pub description: String,
    pub rules: String,
    pub examples: String,
}

/// What a social tree's scene tells its agents (`GET /devui/simtree/{tree}`'s `scene`): the
/// prose every prompt carries — the document's where it gives some, else the type's — and, for
/// a custom scene, its roles (with their private instructions), phases and outcomes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SceneAbout {
    #[serde(rename = "type")]
    pub kind: SceneKind,
    pub description: String,
    pub rules: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub examples: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<crate::custom::RoleDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseAbout>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<String>,
}

/// A custom scene's phase as the tree page lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PhaseAbout {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// One action of a scene type's catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ActionInfo {
    pub name: ActionKind,
    /// Offered by every scene type.
    pub common: bool,
    pub description: String,
    pub usage: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique_and_round_trip() {
        assert_eq!(ActionKind::ALL.len(), 29);
        for &k in ActionKind::ALL {
            assert_eq!(ActionKind::from_name(k.name()), Some(k));
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
        assert_eq!(ActionKind::from_name("fly"), None);
    }

    #[test]
    fn each_action_is_common_or_one_scenes_own() {
        for &a in ActionKind::ALL {
            let owners = SceneKind::OFFERED.iter().filter(|s| s.own_actions().contains(&a)).count();
            let common = COMMON_ACTIONS.contains(&a) as usize;
            assert_eq!(owners + common, 1, "{a}");
        }
    }

    #[test]
    fn scene_names_round_trip() {
        for k in [SceneKind::EmotionalConflict, SceneKind::Custom].into_iter().chain(SceneKind::OFFERED) {
            assert_eq!(SceneKind::from_name(k.name()), Some(k));
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
    }

    #[test]
    fn merged_prose_takes_each_given_part_and_keeps_the_rest() {
        let own: SceneProse = serde_json::from_str(
            r#"{"rules":"old rules","actions":{"vote":{"description":"old line","usage":"old usage"}}}"#,
        )
        .unwrap();
        let given: SceneProse =
            serde_json::from_str(r#"{"description":"a jury room","actions":{"vote":{"description":"new line"}}}"#)
                .unwrap();
        let m = own.merged(&given);
        assert_eq!(m.description.as_deref(), Some("a jury room"));
        assert_eq!(m.rules.as_deref(), Some("old rules"));
        assert_eq!(m.examples, None);
        let vote = m.action(ActionKind::Vote).unwrap();
        assert_eq!(vote.description.as_deref(), Some("new line"));
        assert_eq!(vote.usage.as_deref(), Some("old usage"));
        assert_eq!(SceneProse::default().merged(&SceneProse::default()), SceneProse::default());
    }

    #[test]
    fn prose_naming_a_foreign_action_is_refused_with_the_catalogue() {
        let prose: SceneProse =
            serde_json::from_value(serde_json::json!({"actions": {"vote": {"description": "cast a verdict"}}}))
                .unwrap();
        assert_eq!(prose.check(SceneKind::Council), Ok(()));
        let e = prose.check(SceneKind::SimpleChat).unwrap_err().to_string();
        assert_eq!(
            e,
            "prose.actions.vote: vote is not an action of the simple_chat scene (its actions: speak, send_message, talk_to, yield, web_search, view_page, schedule_order)"
        );
        let long = SceneProse { rules: Some("x".repeat(MAX_PROSE_CHARS + 1)), ..SceneProse::default() };
        assert!(long.check(SceneKind::Council).unwrap_err().to_string().starts_with("prose.rules: 20001"));
    }
}
