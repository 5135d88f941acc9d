//! village (upstream `village_scene`): villagers live on a grid map with named places, walk along
//! A* paths that cost energy, gather resources, rest, and talk only to neighbours within
//! `chat_range` (spec §1.10.5, §1.6.7). Every turn takes an hour: the acting villager grows hungrier
//! and more tired.
//!
//! The map lives in the scene's config behind an `Arc`: cloning a simulator shares it, and the
//! first write after a clone (gathering, occupancy) copies it once with `Arc::make_mut`. Resource
//! counts therefore travel with clones, as upstream's serialised config does; occupancy sets (who
//! stands in a named place) are not serialised, as upstream.
//!
//! Deliberate differences from upstream:
//! * `print_map_each_turn` is accepted and kept in the config but does nothing: upstream calls a
//!   method that does not exist when it is set and crashes (spec §0.5).
//! * Map configs are validated: width and height must be 1..=1000, tile movement costs must not be
//!   negative (upstream's A* never ends on a negative cycle), and location names must be unique.
//! * A `map_xy` given as two numbers is normalised to integers when an agent joins; anything else
//!   there counts as "no position" (upstream crashes on it).
//! * Missing `hunger`/`energy`/`inventory` properties read as 0/100/`{}` instead of crashing.
//! * Unparseable integers (`x`, `y`, `radius`, `amount`) and a mover without `map_xy` are action
//!   errors (no `action_end`), like upstream's exceptions; missing `x`/`y` too (upstream's KeyError).
//! * A move's `from` is the cell the mover's `map_xy` reads as (its first two integers); upstream
//!   echoes the property, which differs only when a branch op or an imported state made it a
//!   longer list (joining rewrites it to two integers).

use std::collections::BTreeSet;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Number, Value, json};
use simtree_shared::ResourceSource;

use super::{SceneError, SceneRules};
use crate::engine::action::{ActionCtx, ActionError, ActionKind, ActionResult, ActionSpec, Handled, Outcome, required};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::prompt::SceneText;
use crate::engine::pyrepr::{py_repr, py_str};
use crate::engine::scenes::handle_common;
use crate::engine::world::World;

/// Largest accepted map side; keeps a path search on an unreachable target bounded.
pub(crate) const MAX_SIDE: i64 = 1000;

type Xy = (i64, i64);

/// Manhattan distance without overflow on absurd coordinates.
fn manhattan(a: Xy, b: Xy) -> i64 {
    let d = (i128::from(a.0) - i128::from(b.0)).abs() + (i128::from(a.1) - i128::from(b.1)).abs();
    i64::try_from(d).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The map

/// One explicitly stored grid cell. Cells not stored are passable plain ground of cost 1.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Tile {
    passable: bool,
    movement_cost: i64,
    terrain: String,
    resources: IndexMap<String, i64>,
}

/// A named place on the map (upstream `MapLocation`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Location {
    name: String,
    x: i64,
    y: i64,
    /// `building`, `resource`, `landmark` or `generic`; resting in a building restores more.
    #[serde(rename = "type", default = "generic")]
    kind: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    resources: IndexMap<String, i64>,
    /// Most agents that can be "in" the place at once; -1 = unlimited.
    #[serde(default = "unlimited")]
    capacity: i64,
    /// Who is here (upstream `agents_here`); not serialised, as upstream.
    #[serde(skip)]
    occupants: BTreeSet<String>,
}

fn generic() -> String {
    "generic".into()
}
fn unlimited() -> i64 {
    -1
}
fn twenty() -> i64 {
    20
}
fn yes() -> bool {
    true
}
fn one() -> i64 {
    1
}
fn plain() -> String {
    "plain".into()
}

impl Location {
    fn xy(&self) -> Xy {
        (self.x, self.y)
    }

    /// Joins the place unless it is full (upstream ignores a refusal too).
    fn add_occupant(&mut self, agent: &str) {
        if self.capacity == -1 || (self.occupants.len() as i64) < self.capacity {
            self.occupants.insert(agent.to_string());
        }
    }
}

/// The serialised form of a map: upstream's `{width, height, tiles, locations}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapData {
    #[serde(default = "twenty")]
    width: i64,
    #[serde(default = "twenty")]
    height: i64,
    #[serde(default)]
    tiles: Vec<TileData>,
    #[serde(default)]
    locations: Vec<Location>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TileData {
    x: i64,
    y: i64,
    #[serde(default = "yes")]
    passable: bool,
    #[serde(default = "one")]
    movement_cost: i64,
    #[serde(default = "plain")]
    terrain: String,
    #[serde(default)]
    resources: IndexMap<String, i64>,
}

#[derive(Serialize)]
struct MapView<'a> {
    width: i64,
    height: i64,
    tiles: Vec<TileView<'a>>,
    locations: &'a [Location],
}

#[derive(Serialize)]
struct TileView<'a> {
    x: i64,
    y: i64,
    #[serde(flatten)]
    tile: &'a Tile,
}

/// The village grid: its size, the sparse special tiles and the named places.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GameMap {
    width: i64,
    height: i64,
    /// Stored tiles in insertion order (upstream's dict); may lie outside the grid.
    tiles: IndexMap<Xy, Tile>,
    /// Named places in insertion order; all inside the grid, names unique.
    locations: Vec<Location>,
}

impl Default for GameMap {
    fn default() -> Self {
        GameMap { width: 20, height: 20, tiles: IndexMap::new(), locations: Vec::new() }
    }
}

impl Serialize for GameMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tiles = self.tiles.iter().map(|(&(x, y), tile)| TileView { x, y, tile }).collect();
        MapView { width: self.width, height: self.height, tiles, locations: &self.locations }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for GameMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        GameMap::from_data(MapData::deserialize(d)?).map_err(D::Error::custom)
    }
}

impl GameMap {
    fn from_data(data: MapData) -> Result<GameMap, SceneError> {
        for (what, side) in [("width", data.width), ("height", data.height)] {
            if !(1..=MAX_SIDE).contains(&side) {
                return Err(SceneError::MapSide { what, side });
            }
        }
        let mut map = GameMap { width: data.width, height: data.height, tiles: IndexMap::new(), locations: Vec::new() };
        for t in data.tiles {
            if t.movement_cost < 0 {
                return Err(SceneError::NegativeCost { x: t.x, y: t.y, cost: t.movement_cost });
            }
            let tile = Tile {
                passable: t.passable,
                movement_cost: t.movement_cost,
                terrain: t.terrain,
                resources: t.resources,
            };
            map.tiles.insert((t.x, t.y), tile);
        }
        for loc in data.locations {
            if map.location(&loc.name).is_some() {
                return Err(SceneError::DuplicateLocation(loc.name));
            }
            // Upstream silently drops places outside the grid.
            if map.in_bounds(loc.xy()) {
                map.locations.push(loc);
            }
        }
        Ok(map)
    }

    #[cfg(test)]
    pub(crate) fn locations(&self) -> &[Location] {
        &self.locations
    }

    pub(crate) fn location(&self, name: &str) -> Option<&Location> {
        self.locations.iter().find(|l| l.name == name)
    }

    /// The place at a cell; when two share a cell the later one wins (upstream's grid index).
    pub(crate) fn location_at(&self, xy: Xy) -> Option<&Location> {
        self.locations.iter().rev().find(|l| l.xy() == xy)
    }

    fn location_at_mut(&mut self, xy: Xy) -> Option<&mut Location> {
        self.locations.iter_mut().rev().find(|l| l.xy() == xy)
    }

    pub(crate) fn tile(&self, xy: Xy) -> Option<&Tile> {
        self.tiles.get(&xy)
    }

    fn terrain(&self, xy: Xy) -> &str {
        self.tile(xy).map_or("plain", |t| t.terrain.as_str())
    }

    fn in_bounds(&self, (x, y): Xy) -> bool {
        (0..self.width).contains(&x) && (0..self.height).contains(&y)
    }

    fn is_passable(&self, xy: Xy) -> bool {
        self.in_bounds(xy) && self.tile(xy).is_none_or(|t| t.passable)
    }

    fn step_cost(&self, xy: Xy) -> i64 {
        self.tile(xy).map_or(1, |t| t.movement_cost)
    }

    /// A* over the 4-neighbour grid, exactly as upstream: step cost = the entered tile's
    /// `movement_cost`, Manhattan heuristic, open set popped in `(f, (x, y))` order with stale
    /// entries left in place, neighbours tried as +x, -x, +y, -y. The path includes both ends.
    pub(crate) fn find_path(&self, start: Xy, goal: Xy) -> Option<Vec<Xy>> {
        use std::cmp::Reverse;
        use std::collections::{BinaryHeap, HashMap};
        if start == goal {
            return Some(vec![goal]);
        }
        if !(self.is_passable(start) && self.is_passable(goal)) {
            return None;
        }
        let mut open = BinaryHeap::new();
        open.push(Reverse((0i64, start)));
        let mut came_from: HashMap<Xy, Xy> = HashMap::new();
        let mut g_score: HashMap<Xy, i64> = HashMap::from([(start, 0)]);
        while let Some(Reverse((_, current))) = open.pop() {
            if current == goal {
                let mut path = vec![current];
                let mut at = current;
                while let Some(&prev) = came_from.get(&at) {
                    path.push(prev);
                    at = prev;
                }
                path.reverse();
                return Some(path);
            }
            let g = g_score.get(&current).copied().unwrap_or(0);
            let (cx, cy) = current;
            for next in [(cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)] {
                if !self.is_passable(next) {
                    continue;
                }
                let tentative = g.saturating_add(self.step_cost(next));
                if g_score.get(&next).is_none_or(|&old| tentative < old) {
                    came_from.insert(next, current);
                    g_score.insert(next, tentative);
                    open.push(Reverse((tentative.saturating_add(manhattan(next, goal)), next)));
                }
            }
        }
        None
    }

    /// Energy units of a path before the scene's multiplier: every entered tile costs its
    /// `movement_cost`, at least 1 (the start tile is free).
    pub(crate) fn path_cost(&self, path: &[Xy]) -> i64 {
        path.iter().skip(1).fold(0i64, |sum, &xy| sum.saturating_add(self.step_cost(xy).max(1)))
    }

    /// Places within `radius` (Manhattan) of a cell, nearest first; ties in (y, x, name) order.
    pub(crate) fn nearby_locations(&self, xy: Xy, radius: i64) -> Vec<&Location> {
        let mut near: Vec<&Location> = self.locations.iter().filter(|l| manhattan(l.xy(), xy) <= radius).collect();
        near.sort_by(|a, b| (a.y, a.x, &a.name).cmp(&(b.y, b.x, &b.name)));
        near.sort_by_key(|l| manhattan(l.xy(), xy));
        near
    }
}

// ---------------------------------------------------------------------------------------------
// Agent properties

fn int_prop(agent: &Agent, key: &str) -> Option<i64> {
    let v = agent.properties.get(key)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

fn energy(agent: &Agent) -> i64 {
    int_prop(agent, "energy").unwrap_or(100)
}

fn set_prop(agent: &mut Agent, key: &str, value: Value) {
    agent.properties.insert(key.to_string(), value);
}

/// An integer action field, parsed like Python's `int(str)`; anything else is an action error.
fn parse_int(call_name: &str, field: &str, value: &str) -> Result<i64, ActionError> {
    value
        .trim()
        .parse()
        .map_err(|_| ActionError(format!("action {call_name}: <{field}> must be an integer, got '{value}'")))
}

// ---------------------------------------------------------------------------------------------
// The scene

fn default_movement_cost() -> Number {
    Number::from(1)
}
fn default_chat_range() -> i64 {
    5
}

/// Scene configuration in a scenario file; also the scene's serialised `config`
/// (`{movement_cost, chat_range, map, print_map_each_turn}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Multiplies a path's energy cost (may be fractional).
    #[serde(default = "default_movement_cost")]
    movement_cost: Number,
    /// Manhattan distance within which agents hear each other.
    #[serde(default = "default_chat_range")]
    chat_range: i64,
    #[serde(default)]
    map: Arc<GameMap>,
    /// Accepted for compatibility and ignored (upstream crashes when it is true).
    #[serde(default)]
    print_map_each_turn: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            movement_cost: default_movement_cost(),
            chat_range: default_chat_range(),
            map: Arc::default(),
            print_map_each_turn: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Minutes since the first morning; +60 per turn.
    pub(crate) time: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Village {
    name: String,
    initial_event: String,
    state: State,
    config: Config,
}

impl Village {
    pub(crate) fn new(name: String, initial_event: String, config: Config) -> Self {
        Village { name, initial_event, state: State { time: 0 }, config }
    }

    pub(crate) fn map(&self) -> &GameMap {
        &self.config.map
    }

    fn map_mut(&mut self) -> &mut GameMap {
        Arc::make_mut(&mut self.config.map)
    }

    /// The agent's cell: `map_xy`, else the place named by `map_position`.
    fn position(&self, agent: &Agent) -> Option<Xy> {
        agent.map_xy().or_else(|| {
            let name = agent.properties.get("map_position")?.as_str()?;
            self.map().location(name).map(Location::xy)
        })
    }

    /// Moves an agent's occupancy to the place at `xy` (if any), leaving every other place.
    /// Writes (and so copies a shared map) only when something changes.
    fn sync_occupancy(&mut self, agent: &str, xy: Option<Xy>) {
        let map = self.map();
        let here = xy.and_then(|xy| map.location_at(xy)).map(|l| l.name.clone());
        let stale = map.locations.iter().any(|l| l.occupants.contains(agent) && Some(&l.name) != here.as_ref());
        let missing = here.as_ref().is_some_and(|h| map.location(h).is_some_and(|l| !l.occupants.contains(agent)));
        if !stale && !missing {
            return;
        }
        for loc in &mut self.map_mut().locations {
            if Some(&loc.name) == here.as_ref() {
                loc.add_occupant(agent);
            } else {
                loc.occupants.remove(agent);
            }
        }
    }

    fn move_to_location(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        let call = ctx.call;
        let failed = format!("{name} move failed");
        let target = match call.get("location").filter(|l| !l.is_empty()) {
            Some(place) => match self.map().location(place) {
                Some(loc) => loc.xy(),
                None => {
                    world.feedback(ctx.actor, &format!("Location '{place}' does not exist."));
                    let result =
                        ActionResult::UnknownLocation { error: "unknown_location".into(), location: place.into() };
                    return Ok(Outcome::fail(result, failed));
                }
            },
            None => {
                (parse_int(&call.name, "x", required(call, "x")?)?, parse_int(&call.name, "y", required(call, "y")?)?)
            }
        };
        let (tx, ty) = target;
        let to = [tx, ty];
        let move_failed = |error: &str| ActionResult::MoveFailed { error: error.into(), to };
        let Some(start) = world.agents[ctx.actor].map_xy() else {
            return Err(ActionError(format!("{name} has no position (properties.map_xy) to move from")));
        };
        if start == target {
            world.feedback(ctx.actor, "You are already at the target.");
            return Ok(Outcome::fail(move_failed("already_there"), format!("{name} move skipped")));
        }
        let Some(path) = self.map().find_path(start, target) else {
            world.feedback(ctx.actor, "No reachable path; possibly blocked by obstacles.");
            return Ok(Outcome::fail(move_failed("no_path"), failed));
        };
        let multiplier = self.config.movement_cost.as_f64().unwrap_or(1.0);
        // Python's int() truncates toward zero; the `as` cast saturates on overflow.
        let cost = ((self.map().path_cost(&path) as f64 * multiplier).trunc() as i64).max(1);
        let agent = &mut world.agents[ctx.actor];
        let have = energy(agent);
        if have < cost {
            let line = format!("Not enough energy. Moving to ({tx}, {ty}) costs {cost}, you have {have}.");
            world.feedback(ctx.actor, &line);
            let result = ActionResult::LowEnergy { error: "low_energy".into(), required: cost, have };
            return Ok(Outcome::fail(result, failed));
        }
        let arrived = self.map().location_at(target);
        let position = arrived.map_or_else(|| format!("{tx},{ty}"), |l| l.name.clone());
        let desc = arrived.map_or_else(|| self.map().terrain(target).to_string(), |l| l.description.clone());
        set_prop(agent, "map_xy", json!(to));
        set_prop(agent, "map_position", Value::String(position));
        set_prop(agent, "energy", json!(have.saturating_sub(cost)));
        self.sync_occupancy(&name, Some(target));

        world.feedback(ctx.actor, &format!("You arrived at ({tx}, {ty}). {desc}"));
        let nearby: Vec<String> = world
            .agents
            .iter()
            .filter(|o| o.name != name)
            .filter_map(|o| {
                let d = manhattan(o.map_xy()?, target);
                (d <= self.config.chat_range).then(|| format!("{} (distance {d})", o.name))
            })
            .collect();
        if !nearby.is_empty() {
            world.feedback(ctx.actor, &format!("Nearby agents: {}", nearby.join(", ")));
        }
        // `from` is the cell `map_xy` was read as: a property patched to a longer list reports its
        // first two numbers (upstream echoes the property as it is).
        let moved = ActionResult::Moved {
            from: [start.0, start.1],
            to,
            energy_cost: cost,
            path: path.iter().map(|&(x, y)| [x, y]).collect(),
        };
        Ok(Outcome::ok(moved, format!("{name} moved to ({tx}, {ty}) (energy {cost})"), false))
    }

    fn look_around(&self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        let Some(xy) = self.position(&world.agents[ctx.actor]) else {
            // Upstream gives no feedback here.
            return Ok(Outcome::fail(ActionResult::error("unknown_position"), format!("{name} look failed")));
        };
        let radius = match ctx.call.get("radius") {
            Some(r) => parse_int(&ctx.call.name, "radius", r)?,
            None => self.config.chat_range.clamp(3, 7),
        };
        let map = self.map();
        let here = match map.location_at(xy) {
            Some(loc) => format!("{}: {}", loc.name, loc.description),
            None => map.terrain(xy).to_string(),
        };
        let mut info = vec![format!("You are at ({},{}): {here}", xy.0, xy.1)];
        if let Some(tile) = map.tile(xy).filter(|t| !t.resources.is_empty()) {
            let list: Vec<String> = tile.resources.iter().map(|(k, v)| format!("{k}({v})")).collect();
            info.push(format!("Resources here: {}", list.join(", ")));
        }
        let places = map.nearby_locations(xy, radius);
        if !places.is_empty() {
            info.push("Nearby locations:".into());
            // The cap of 8 counts the place the agent stands on, which is then skipped.
            for loc in places.iter().take(8) {
                let d = manhattan(loc.xy(), xy);
                if d != 0 {
                    info.push(format!("  - {} (distance: {d}) - {}", loc.name, loc.description));
                }
            }
        }
        let mut people: Vec<(i64, &str)> = world
            .agents
            .iter()
            .filter(|o| o.name != name)
            .filter_map(|o| Some((manhattan(o.map_xy()?, xy), o.name.as_str())))
            .filter(|(d, _)| *d <= radius)
            .collect();
        people.sort_by_key(|(d, _)| *d);
        if !people.is_empty() {
            let list: Vec<String> = people.iter().take(10).map(|(d, n)| format!("{n}({d})")).collect();
            info.push(format!("Nearby agents: {}", list.join(", ")));
        }
        world.feedback(ctx.actor, &info.join("\n"));
        Ok(Outcome::ok(ActionResult::LookedAround { radius }, format!("{name} looked around (r={radius})"), false))
    }

    fn gather_resource(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        let failed = format!("{name} gather failed");
        let resource = ctx.call.get("resource");
        // Upstream formats a missing resource as Python's None.
        let shown = resource.unwrap_or("None");
        let amount = match ctx.call.get("amount") {
            Some(a) => parse_int(&ctx.call.name, "amount", a)?,
            None => 1,
        };
        let Some(xy) = self.position(&world.agents[ctx.actor]) else {
            world.feedback(ctx.actor, "Current position unknown; cannot gather.");
            return Ok(Outcome::fail(ActionResult::error("unknown_position"), failed));
        };
        let map = self.map();
        let from_tile = resource.and_then(|r| map.tile(xy)?.resources.get(r).copied());
        let (available, source) = match from_tile {
            Some(n) => (n, ResourceSource::Tile),
            None => {
                let at_place = resource.and_then(|r| map.location_at(xy)?.resources.get(r).copied());
                let source = if at_place.is_some() { ResourceSource::Location } else { ResourceSource::Tile };
                (at_place.unwrap_or(0), source)
            }
        };
        let no_resource =
            |error: &str| ActionResult::NoResource { error: error.into(), resource: resource.map(str::to_string) };
        if available <= 0 {
            world.feedback(ctx.actor, &format!("No {shown} to gather here."));
            return Ok(Outcome::fail(no_resource("not_available"), failed));
        }
        let taken = amount.min(available).max(0);
        let Some(resource) = resource.filter(|_| taken > 0) else {
            world.feedback(ctx.actor, &format!("{shown} is depleted."));
            return Ok(Outcome::fail(no_resource("depleted"), failed));
        };
        let map = self.map_mut();
        let stock = if source == ResourceSource::Tile {
            map.tiles.get_mut(&xy).and_then(|t| t.resources.get_mut(resource))
        } else {
            map.location_at_mut(xy).and_then(|l| l.resources.get_mut(resource))
        };
        if let Some(stock) = stock {
            *stock -= taken;
        }
        let agent = &mut world.agents[ctx.actor];
        let mut inventory = match agent.properties.get("inventory") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let held = inventory.get(resource).and_then(Value::as_i64).unwrap_or(0);
        inventory.insert(resource.to_string(), json!(held.saturating_add(taken)));
        let shown_inventory = py_repr(&Value::Object(inventory.clone()));
        set_prop(agent, "inventory", Value::Object(inventory));
        world.feedback(ctx.actor, &format!("You gathered {taken} {resource}. Inventory: {shown_inventory}"));
        let gathered =
            ActionResult::Gathered { resource: resource.to_string(), amount: taken, source, position: [xy.0, xy.1] };
        Ok(Outcome::ok(gathered, format!("{name} gathered {taken} {resource}"), false))
    }

    fn rest(&self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let name = ctx.actor_name(world).to_string();
        let agent = &world.agents[ctx.actor];
        let place = agent.properties.get("map_position").and_then(Value::as_str).and_then(|p| self.map().location(p));
        let (gain, line) = match place {
            Some(loc) if loc.kind == "building" => (30, format!("You rest comfortably in {}.", loc.name)),
            Some(loc) => (15, format!("You take a short rest at {}.", loc.name)),
            None => (15, "You take a short rest at this spot.".to_string()),
        };
        let new_energy = energy(agent).saturating_add(gain).min(100);
        world.feedback(ctx.actor, &line);
        set_prop(&mut world.agents[ctx.actor], "energy", json!(new_energy));
        let rested = ActionResult::Rested { energy_gain: gain, new_energy };
        Ok(Outcome::ok(rested, format!("{name} rested (+{gain} energy)"), false))
    }
}

const GUIDELINES: &str = "Village life:\n\
- Wander to new places to discover resources and run into your neighbours.\n\
- Collect resources wherever a tile or a named place offers them.\n\
- Rest inside buildings to regain the most energy, and plan routes so you do not waste it.\n\
- Only people close to you can hear you; say things that matter to them.\n\
- Every turn takes time: you grow hungrier and more tired.\n\
\n\
Getting around:\n\
- Check your surroundings before you pick a destination.\n\
- Weigh the distance and the energy a trip will cost.\n\
- See to urgent needs such as food and rest first.";

const EXAMPLES: &str = "Example 1:\n\
--- Thoughts ---\n\
My stomach is empty; the farm should have something to eat.\n\
\n\
--- Plan ---\n\
1. Walk to the farm. [CURRENT]\n\
2. Pick a few apples.\n\
\n\
--- Action ---\n\
<Action name=\"move_to_location\"><location>farm</location></Action>\n\
\n\
Example 2:\n\
--- Thoughts ---\n\
Lyra is standing close by; a friendly word costs nothing.\n\
\n\
--- Plan ---\n\
1. Look around.\n\
2. Greet a neighbour. [CURRENT]\n\
\n\
--- Action ---\n\
<Action name=\"talk_to\"><to>Lyra</to><message>Good to see you, Lyra!</message></Action>";

impl SceneRules for Village {
    clock_and_opening!();
    fn minutes_per_turn(&self) -> i64 {
        0
    }
    fn text(&self) -> SceneText {
        let map = self.map();
        // "grid-based virtual village" is the phrase the mock LLM recognises this scene by.
        let description = format!(
            "Your home is a grid-based virtual village of {w}x{h} cells. Every villager has a position on the grid, \
             needs that change over time (hunger and energy) and an inventory of belongings. You can walk across the map, \
             collect resources and meet the other villagers.\n\
             - move_to_location takes you to a named place or to coordinates; each step costs energy that depends on the \
             terrain, multiplied by {cost}.\n\
             - look_around shows the places, resources and people near you; others hear you only within a distance of {range}.",
            w = map.width,
            h = map.height,
            cost = self.config.movement_cost,
            range = self.config.chat_range,
        );
        SceneText::plain(description, GUIDELINES, EXAMPLES)
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        use ActionKind::*;
        vec![TalkTo, MoveToLocation, LookAround, GatherResource, Rest, Yield]
    }
    fn chat_range(&self) -> Option<i64> {
        Some(self.config.chat_range)
    }

    /// Fills in hunger/energy/inventory and a position (given `map_xy`, else the place named by
    /// `map_position`, else `village_center`, else the grid centre), then names the position.
    fn initialize_agent(&mut self, agent: &mut Agent) {
        for (key, default) in [("hunger", json!(0)), ("energy", json!(100)), ("inventory", json!({}))] {
            agent.properties.entry(key).or_insert(default);
        }
        let given = agent.properties.get("map_xy").and_then(Value::as_array).and_then(|xy| {
            let num = |v: &Value| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64));
            Some((num(xy.first()?)?, num(xy.get(1)?)?))
        });
        let named = || {
            let name = agent.properties.get("map_position")?.as_str()?;
            self.map().location(name).map(Location::xy)
        };
        let xy = given
            .or_else(named)
            .or_else(|| self.map().location("village_center").map(Location::xy))
            .unwrap_or((self.map().width / 2, self.map().height / 2));
        let position = self.map().location_at(xy).map_or_else(|| format!("{},{}", xy.0, xy.1), |l| l.name.clone());
        set_prop(agent, "map_xy", json!([xy.0, xy.1]));
        set_prop(agent, "map_position", Value::String(position));
        self.sync_occupancy(&agent.name, Some(xy));
    }

    fn status_prompt(&self, agent: &Agent) -> String {
        let minutes = self.state.time;
        let hours = minutes.div_euclid(60).rem_euclid(24);
        let mins = minutes.rem_euclid(60);
        // Upstream's day/night split: everything before 18:00, midnight included, is day.
        let time_of_day = if hours < 18 { "day" } else { "night" };
        let xy = agent.map_xy();
        let place = match xy.and_then(|xy| self.map().location_at(xy)) {
            Some(loc) => loc.name.clone(),
            None => agent.properties.get("map_position").map_or_else(|| "?".into(), py_str),
        };
        let (x, y) = xy.map_or(("None".into(), "None".into()), |(x, y)| (x.to_string(), y.to_string()));
        let prop = |key: &str, default: Value| py_str(agent.properties.get(key).unwrap_or(&default));
        format!(
            "\n--- Status ---\nCurrent position: {place} at ({x},{y})\nHunger level: {}\nEnergy level: {}\nInventory: {}\nCurrent time: {hours}:{mins:02} ({time_of_day})\n",
            prop("hunger", json!(0)),
            prop("energy", json!(100)),
            prop("inventory", json!({})),
        )
    }

    fn handle(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        match ctx.kind {
            ActionKind::MoveToLocation => self.move_to_location(ctx, world),
            ActionKind::LookAround => self.look_around(ctx, world),
            ActionKind::GatherResource => self.gather_resource(ctx, world),
            ActionKind::Rest => self.rest(ctx, world),
            _ => handle_common(self, ctx, world),
        }
    }

    /// Speech reaches the speaker and everyone within `chat_range`; an agent without coordinates
    /// (or a speaker without them) always hears. No `system_broadcast` is recorded, as upstream.
    fn deliver_message(&mut self, event: &SceneEvent, sender: usize, world: &mut World) {
        let line = event.line(Some(self.state.time));
        world.feedback(sender, &line);
        let from = world.agents.get(sender).and_then(Agent::map_xy);
        for i in 0..world.agents.len() {
            if i == sender {
                continue;
            }
            let hears = match (from, world.agents[i].map_xy()) {
                (Some(a), Some(b)) => manhattan(a, b) <= self.config.chat_range,
                _ => true,
            };
            if hears {
                world.feedback(i, &line);
            }
        }
    }

    /// An hour passes; the acting villager gets hungrier and more tired and is warned when
    /// hunger reaches 70 or energy falls to 30.
    fn post_turn(&mut self, actor: usize, world: &mut World) {
        self.state.time = self.state.time.saturating_add(60 + self.minutes_per_turn());
        let Some(agent) = world.agents.get_mut(actor) else {
            return;
        };
        let hunger = int_prop(agent, "hunger").unwrap_or(0).saturating_add(3).min(100);
        let energy = energy(agent).saturating_sub(2).max(0);
        set_prop(agent, "hunger", json!(hunger));
        set_prop(agent, "energy", json!(energy));
        let (name, xy) = (agent.name.clone(), agent.map_xy());
        if xy.is_some() {
            self.sync_occupancy(&name, xy);
        }
        let time = Some(self.state.time);
        if hunger >= 70 {
            let data = format!("You are quite hungry (hunger: {hunger}). Consider finding food.");
            world.feedback(actor, &SceneEvent::Status { data }.line(time));
        }
        if energy <= 30 {
            let data = format!("You are tired (energy: {energy}). Consider resting or moving less.");
            world.feedback(actor, &SceneEvent::Status { data }.line(time));
        }
    }
}

/// The prompt text of the actions this scene adds, for the catalogue in `scenes/mod.rs`.
pub(crate) const ACTIONS: &[(ActionKind, ActionSpec)] = &[
    (
        ActionKind::MoveToLocation,
        ActionSpec {
            desc: "walk to a named place or to grid coordinates",
            instruction: "- To walk to a named place:\n<Action name=\"move_to_location\"><location>[place name]</location></Action>\n- Or to coordinates:\n<Action name=\"move_to_location\"><x>12</x><y>7</y></Action>\n",
        },
    ),
    (
        ActionKind::LookAround,
        ActionSpec {
            desc: "see the places, resources and people around you",
            instruction: "- To look around (the radius is optional):\n<Action name=\"look_around\"><radius>5</radius></Action>\n",
        },
    ),
    (
        ActionKind::GatherResource,
        ActionSpec {
            desc: "collect a resource where you stand",
            instruction: "- To collect a resource here:\n<Action name=\"gather_resource\"><resource>[resource name]</resource><amount>[number]</amount></Action>\n",
        },
    ),
    (
        ActionKind::Rest,
        ActionSpec {
            desc: "recover energy; resting inside a building helps more",
            instruction: "- To rest:\n<Action name=\"rest\" />\n",
        },
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::event::EventType;
    use crate::engine::parse::ActionCall;
    use crate::engine::scenes::testing::{mock_run, summaries};
    use crate::engine::scenes::{Refused, Scene, check_refusal};
    use crate::engine::simulator::Simulator;
    use crate::scenario::Scenario;

    /// An 8×6 map: a wall at x=3 for y 0..=3, a swamp, a mud patch, a free road tile and a berry
    /// bush under the shed; one place outside the grid (dropped).
    fn map_json() -> Value {
        json!({"width": 8, "height": 6,
          "tiles": [{"x":3,"y":0,"passable":false,"terrain":"wall"},{"x":3,"y":1,"passable":false,"terrain":"wall"},
                    {"x":3,"y":2,"passable":false,"terrain":"wall"},{"x":3,"y":3,"passable":false,"terrain":"wall"},
                    {"x":5,"y":4,"movement_cost":5,"terrain":"swamp"},{"x":4,"y":5,"movement_cost":2,"terrain":"mud"},
                    {"x":2,"y":4,"movement_cost":0,"terrain":"road"},{"x":0,"y":5,"terrain":"bush","resources":{"berry":3}}],
          "locations": [{"name":"well","x":1,"y":1,"type":"landmark","description":"Old well"},
            {"name":"hall","x":6,"y":1,"type":"building","description":"A warm hall","capacity":1},
            {"name":"grove","x":1,"y":4,"type":"resource","description":"Birch grove","resources":{"wood":2,"berry":5}},
            {"name":"shed","x":0,"y":5,"description":"Tool shed","resources":{"berry":9}},
            {"name":"far","x":50,"y":50}]})
    }

    fn agent_at(name: &str, xy: Option<[i64; 2]>) -> Agent {
        let mut a = Agent::new(name, vec![]);
        if let Some(xy) = xy {
            a.properties.insert("map_xy".into(), json!(xy));
        }
        a
    }

    fn build(config: Value, agents: Vec<Agent>) -> (Village, World) {
        let scene =
            Scene::build(crate::engine::scenes::SceneKind::Village, "v".into(), "Dawn.".into(), config).unwrap();
        let sim = Simulator::in_order(agents, scene).unwrap();
        let Scene::Village(v) = sim.scene else { unreachable!() };
        let mut world = sim.world;
        world.pending.clear();
        world.take_out();
        (v, world)
    }

    /// Ann at the well, Bob in the hall, Cy on plain ground, Dee spawned at the grid centre.
    fn setup() -> (Village, World) {
        let agents = vec![
            agent_at("Ann", Some([1, 1])),
            agent_at("Bob", Some([6, 1])),
            agent_at("Cy", Some([1, 3])),
            agent_at("Dee", None),
        ];
        build(json!({"map": map_json()}), agents)
    }

    fn act(v: &mut Village, w: &mut World, actor: &str, call: ActionCall) -> Handled {
        crate::engine::scenes::act_as(v, w, actor, &call)
    }

    /// Runs an action that must not error; returns its outcome and the actor's feedback lines.
    fn run(v: &mut Village, w: &mut World, actor: &str, call: ActionCall) -> (Outcome, Vec<String>) {
        let o = act(v, w, actor, call).unwrap();
        (o, feedback(w).into_iter().filter(|(a, _)| a == actor).map(|(_, c)| c).collect())
    }

    fn feedback(w: &mut World) -> Vec<(String, String)> {
        w.take_out()
            .into_iter()
            .filter(|e| e.kind == EventType::AgentCtxDelta)
            .map(|e| (e.data["agent"].as_str().unwrap().to_string(), e.data["content"].as_str().unwrap().to_string()))
            .collect()
    }

    fn prop<'a>(w: &'a World, agent: &str, key: &str) -> &'a Value {
        &w.agent(agent).unwrap().properties[key]
    }

    fn goto(place: &str) -> ActionCall {
        ActionCall::new("move_to_location").with("location", place)
    }

    fn xy(x: i64, y: i64) -> ActionCall {
        ActionCall::new("move_to_location").with("x", x.to_string()).with("y", y.to_string())
    }

    #[test]
    fn config_round_trips_and_validates() {
        let (v, _) = setup();
        assert_eq!(v.map().locations().len(), 4, "the place outside the grid is dropped");
        let json = serde_json::to_value(Scene::Village(v)).unwrap();
        assert_eq!(json["type"], "village_scene");
        assert_eq!(json["state"], json!({"time": 0}));
        let cfg = &json["config"];
        let keys: Vec<&str> = cfg.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["movement_cost", "chat_range", "map", "print_map_each_turn"]);
        assert_eq!((&cfg["movement_cost"], &cfg["chat_range"]), (&json!(1), &json!(5)));
        assert_eq!(
            cfg["map"]["tiles"][0],
            json!({"x":3,"y":0,"passable":false,"movement_cost":1,"terrain":"wall","resources":{}})
        );
        assert_eq!(
            cfg["map"]["locations"][3],
            json!({"name":"shed","x":0,"y":5,"type":"generic","description":"Tool shed","resources":{"berry":9},"capacity":-1})
        );
        let back: Scene = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);

        let bad = |map: Value| {
            Scene::build(crate::engine::scenes::SceneKind::Village, "v".into(), "".into(), json!({"map": map}))
        };
        let err = |map: Value| bad(map).unwrap_err().to_string();
        assert_eq!(err(json!({"width": 0})), "map: map width must be between 1 and 1000, got 0");
        assert!(err(json!({"height": 5000})).contains("height"));
        assert_eq!(
            err(json!({"tiles": [{"x": 1, "y": 2, "movement_cost": -1}]})),
            "map: tile (1, 2) has a negative movement_cost -1"
        );
        let dup = json!({"locations": [{"name": "a", "x": 1, "y": 1}, {"name": "a", "x": 2, "y": 2}]});
        assert_eq!(err(dup), "map: location 'a' is listed twice");
        assert!(bad(json!({"tiles": [{"y": 1}]})).is_err(), "a tile needs x");
        let cfg = json!({"print_map_each_turn": true, "movement_cost": 0.5});
        let Scene::Village(v) =
            Scene::build(crate::engine::scenes::SceneKind::Village, "v".into(), "".into(), cfg).unwrap()
        else {
            unreachable!()
        };
        assert!(v.config.print_map_each_turn);
        assert_eq!((v.map().width, v.map().height), (20, 20), "default map");
        assert_eq!(serde_json::to_value(&v.config).unwrap()["movement_cost"], json!(0.5));
    }

    #[test]
    fn initialize_agent_sets_defaults_position_and_occupancy() {
        let (v, w) = setup();
        assert_eq!(prop(&w, "Ann", "map_position"), "well");
        assert_eq!(prop(&w, "Cy", "map_position"), "1,3");
        assert_eq!(prop(&w, "Dee", "map_xy"), &json!([4, 3]), "grid centre without a village_center");
        assert_eq!(prop(&w, "Dee", "map_position"), "4,3");
        for a in ["Ann", "Dee"] {
            assert_eq!((prop(&w, a, "hunger"), prop(&w, a, "energy")), (&json!(0), &json!(100)));
            assert_eq!(prop(&w, a, "inventory"), &json!({}));
        }
        assert!(v.map().location("well").unwrap().occupants.contains("Ann"));
        assert!(v.map().location("hall").unwrap().occupants.contains("Bob"));

        // A named position, the village centre, float coordinates, and preset needs.
        let mut named = Agent::new("N", vec![]);
        named.properties.insert("map_position".into(), json!("hall"));
        named.properties.insert("energy".into(), json!(40));
        let mut floaty = agent_at("F", None);
        floaty.properties.insert("map_xy".into(), json!([2.0, 4.0]));
        let mut map = map_json();
        map["locations"].as_array_mut().unwrap().push(json!({"name": "village_center", "x": 5, "y": 2}));
        let (v, w) = build(json!({"map": map}), vec![named, agent_at("C", None), floaty]);
        assert_eq!((prop(&w, "N", "map_xy"), prop(&w, "N", "map_position")), (&json!([6, 1]), &json!("hall")));
        assert_eq!(prop(&w, "N", "energy"), &json!(40));
        assert_eq!(
            (prop(&w, "C", "map_xy"), prop(&w, "C", "map_position")),
            (&json!([5, 2]), &json!("village_center"))
        );
        assert_eq!((prop(&w, "F", "map_xy"), prop(&w, "F", "map_position")), (&json!([2, 4]), &json!("2,4")));
        assert!(v.map().location("village_center").unwrap().occupants.contains("C"));
    }

    #[test]
    fn a_star_takes_upstreams_path_around_walls_and_costly_tiles() {
        let (v, _) = setup();
        let m = v.map();
        // Expected paths computed with upstream's GameMap.find_path on the same map.
        let p = m.find_path((1, 1), (5, 1)).unwrap();
        assert_eq!(p, [(1, 1), (2, 1), (2, 2), (2, 3), (2, 4), (3, 4), (4, 4), (4, 3), (4, 2), (4, 1), (5, 1)]);
        assert_eq!(m.path_cost(&p), 10);
        // Through the free road, then round the swamp over the mud.
        let p = m.find_path((0, 4), (7, 5)).unwrap();
        assert_eq!(p, [(0, 4), (1, 4), (2, 4), (2, 5), (3, 5), (4, 5), (5, 5), (6, 5), (7, 5)]);
        assert_eq!(m.path_cost(&p), 9, "the road counts 1, the mud 2");
        let p = m.find_path((1, 3), (6, 5)).unwrap();
        assert_eq!(p, [(1, 3), (1, 4), (2, 4), (2, 5), (3, 5), (4, 5), (5, 5), (6, 5)]);
        assert_eq!(m.find_path((2, 2), (2, 2)).unwrap(), [(2, 2)]);
        assert_eq!(m.find_path((1, 1), (3, 0)), None, "the goal is a wall");
        assert_eq!(m.find_path((1, 1), (8, 0)), None, "the goal is off the map");
        // A cell walled in on all sides.
        let mut closed = map_json();
        for (x, y) in [(6, 4), (7, 3), (7, 5)] {
            closed["tiles"].as_array_mut().unwrap().push(json!({"x": x, "y": y, "passable": false}));
        }
        let (v, _) = build(json!({"map": closed}), vec![agent_at("A", Some([0, 0]))]);
        assert_eq!(v.map().find_path((0, 0), (7, 4)), None);
    }

    #[test]
    fn move_failures() {
        let (mut v, mut w) = setup();
        let no_path = "No reachable path; possibly blocked by obstacles.";
        #[rustfmt::skip]
        let rows = [
            (goto("castle"), json!({"error": "unknown_location", "location": "castle"}), "Ann move failed", "Location 'castle' does not exist."),
            (goto("well"), json!({"error": "already_there", "to": [1, 1]}), "Ann move skipped", "You are already at the target."),
            (xy(3, 0), json!({"error": "no_path", "to": [3, 0]}), "Ann move failed", no_path),
            (xy(99, 0), json!({"error": "no_path", "to": [99, 0]}), "Ann move failed", no_path),
        ];
        for (call, result, summary, told) in rows {
            check_refusal(&mut v, &mut w, "Ann", &call, Refused { result, summary, told });
        }

        assert!(act(&mut v, &mut w, "Ann", ActionCall::new("move_to_location").with("x", "2")).is_err(), "y missing");
        assert!(act(&mut v, &mut w, "Ann", xy(2, 2).with("x", "two")).is_err(), "x not a number");
        // An empty location falls back to coordinates.
        let (o, _) = run(&mut v, &mut w, "Ann", xy(1, 2).with("location", ""));
        assert!(o.success);

        v.config.movement_cost = Number::from_f64(1.5).unwrap();
        w.agents[3].properties.insert("energy".into(), json!(3));
        let told = "Not enough energy. Moving to (1, 1) costs 10, you have 3.";
        let result = json!({"error": "low_energy", "required": 10, "have": 3});
        let expected = Refused { result, summary: "Dee move failed", told };
        check_refusal(&mut v, &mut w, "Dee", &goto("well"), expected);
        assert_eq!(prop(&w, "Dee", "map_xy"), &json!([4, 3]), "nothing moved");
        assert_eq!(prop(&w, "Dee", "energy"), &json!(3));
    }

    #[test]
    fn a_move_walks_the_path_pays_energy_and_reports_neighbours() {
        let (mut v, mut w) = setup();
        let (o, fb) = run(&mut v, &mut w, "Ann", goto("hall"));
        assert_eq!(fb, ["You arrived at (6, 1). A warm hall", "Nearby agents: Bob (distance 0), Dee (distance 4)"]);
        assert_eq!(
            o.result_json(),
            json!({"from": [1, 1], "to": [6, 1], "energy_cost": 11,
                   "path": [[1,1],[2,1],[2,2],[2,3],[2,4],[3,4],[4,4],[4,3],[4,2],[4,1],[5,1],[6,1]]})
        );
        assert_eq!(o.summary.as_deref(), Some("Ann moved to (6, 1) (energy 11)"));
        assert!(o.success && !o.pass_control);
        assert_eq!(prop(&w, "Ann", "energy"), &json!(89));
        assert_eq!((prop(&w, "Ann", "map_xy"), prop(&w, "Ann", "map_position")), (&json!([6, 1]), &json!("hall")));
        assert!(!v.map().location("well").unwrap().occupants.contains("Ann"));
        assert!(!v.map().location("hall").unwrap().occupants.contains("Ann"), "the hall holds one");

        // Coordinates on unnamed ground: the terrain describes it. (Expected values from
        // upstream's handler on the same map.)
        let (o, fb) = run(&mut v, &mut w, "Cy", xy(7, 5));
        assert_eq!(
            fb,
            ["You arrived at (7, 5). plain", "Nearby agents: Ann (distance 5), Bob (distance 5), Dee (distance 5)"]
        );
        assert_eq!(o.result_json()["energy_cost"], 9, "the road tile costs 1 energy although A* treats it as free");
        assert_eq!(
            o.result_json()["path"],
            json!([[1, 3], [1, 4], [2, 4], [2, 5], [3, 5], [4, 5], [5, 5], [6, 5], [7, 5]])
        );
        assert_eq!(prop(&w, "Cy", "map_position"), "7,5");
        assert_eq!(prop(&w, "Cy", "energy"), &json!(91));
        // The multiplier scales and truncates: 2 steps × 1.5 = 3.
        v.config.movement_cost = Number::from_f64(1.5).unwrap();
        let (o, fb) = run(&mut v, &mut w, "Cy", xy(5, 5));
        assert_eq!(
            fb,
            ["You arrived at (5, 5). plain", "Nearby agents: Ann (distance 5), Bob (distance 5), Dee (distance 3)"]
        );
        assert_eq!(o.result_json()["energy_cost"], 3);
        v.config.movement_cost = Number::from_f64(0.1).unwrap();
        let (o, _) = run(&mut v, &mut w, "Cy", xy(6, 5));
        assert_eq!(o.result_json()["energy_cost"], 1, "at least 1");
    }

    #[test]
    fn look_around_lists_place_resources_nearby_places_and_people() {
        let (mut v, mut w) = setup();
        let (o, fb) = run(&mut v, &mut w, "Ann", ActionCall::new("look_around"));
        assert_eq!(
            fb,
            [
                "You are at (1,1): well: Old well\nNearby locations:\n  - grove (distance: 3) - Birch grove\n  - hall (distance: 5) - A warm hall\n  - shed (distance: 5) - Tool shed\nNearby agents: Cy(2), Bob(5), Dee(5)"
            ]
        );
        assert_eq!(o.result_json(), json!({"radius": 5}));
        assert_eq!(o.summary.as_deref(), Some("Ann looked around (r=5)"));
        let (o, fb) = run(&mut v, &mut w, "Dee", ActionCall::new("look_around").with("radius", "2"));
        assert_eq!(fb, ["You are at (4,3): plain"]);
        assert_eq!(o.summary.as_deref(), Some("Dee looked around (r=2)"));
        run(&mut v, &mut w, "Cy", xy(0, 5));
        let (_, fb) = run(&mut v, &mut w, "Cy", ActionCall::new("look_around"));
        assert_eq!(
            fb,
            [
                "You are at (0,5): shed: Tool shed\nResources here: berry(3)\nNearby locations:\n  - grove (distance: 2) - Birch grove\n  - well (distance: 5) - Old well\nNearby agents: Ann(5)"
            ]
        );
        assert!(act(&mut v, &mut w, "Cy", ActionCall::new("look_around").with("radius", "far")).is_err());

        // The default radius is chat_range clamped to 3..=7.
        v.config.chat_range = 1;
        assert_eq!(run(&mut v, &mut w, "Ann", ActionCall::new("look_around")).0.result_json(), json!({"radius": 3}));
        v.config.chat_range = 40;
        assert_eq!(run(&mut v, &mut w, "Ann", ActionCall::new("look_around")).0.result_json(), json!({"radius": 7}));

        // No position at all: a silent failure.
        w.agents[0].properties.remove("map_xy");
        w.agents[0].properties.insert("map_position".into(), json!("1,1"));
        let (o, fb) = run(&mut v, &mut w, "Ann", ActionCall::new("look_around"));
        assert!(fb.is_empty());
        assert_eq!(o.result_json(), json!({"error": "unknown_position"}));
        assert_eq!(o.summary.as_deref(), Some("Ann look failed"));
        // A named position is enough.
        w.agents[0].properties.insert("map_position".into(), json!("grove"));
        let (_, fb) = run(&mut v, &mut w, "Ann", ActionCall::new("look_around").with("radius", "0"));
        assert_eq!(fb, ["You are at (1,4): grove: Birch grove\nNearby locations:"]);
    }

    #[test]
    fn look_around_caps_places_at_eight_including_the_own_one_and_people_at_ten() {
        let locations: Vec<Value> = (0..10).map(|i| json!({"name": format!("p{i}"), "x": i, "y": 0})).collect();
        let mut agents: Vec<Agent> = (0..12).map(|i| agent_at(&format!("a{i}"), Some([i, 1]))).collect();
        agents.insert(0, agent_at("Me", Some([0, 0])));
        let (mut v, mut w) = build(json!({"map": {"width": 12, "height": 3, "locations": locations}}), agents);
        let (_, fb) = run(&mut v, &mut w, "Me", ActionCall::new("look_around").with("radius", "20"));
        let lines: Vec<&str> = fb[0].lines().collect();
        assert_eq!(lines[0], "You are at (0,0): p0: ");
        assert_eq!(lines[1], "Nearby locations:");
        assert_eq!(lines[2], "  - p1 (distance: 1) - ");
        assert_eq!(lines[8], "  - p7 (distance: 7) - ");
        assert_eq!(lines.len(), 10, "p0 takes one of the eight slots and is skipped");
        assert_eq!(lines[9], "Nearby agents: a0(1), a1(2), a2(3), a3(4), a4(5), a5(6), a6(7), a7(8), a8(9), a9(10)");
    }

    #[test]
    fn gather_from_tile_then_location_until_depleted() {
        let (mut v, mut w) = setup();
        let gather = |r: &str| ActionCall::new("gather_resource").with("resource", r);
        run(&mut v, &mut w, "Cy", xy(0, 5));
        // The tile's berries come before the shed's.
        let (o, fb) = run(&mut v, &mut w, "Cy", gather("berry").with("amount", "5"));
        assert_eq!(fb, ["You gathered 3 berry. Inventory: {'berry': 3}"]);
        assert_eq!(o.result_json(), json!({"resource": "berry", "amount": 3, "source": "tile", "position": [0, 5]}));
        assert_eq!(o.summary.as_deref(), Some("Cy gathered 3 berry"));
        // An emptied tile stock does not fall back to the place's.
        let cannot = |v: &mut Village, w: &mut World, call: ActionCall, result: Value, told: &str| {
            check_refusal(v, w, "Cy", &call, Refused { result, summary: "Cy gather failed", told });
        };
        let result = json!({"error": "not_available", "resource": "berry"});
        cannot(&mut v, &mut w, gather("berry"), result, "No berry to gather here.");
        let result = json!({"error": "not_available", "resource": "wood"});
        cannot(&mut v, &mut w, gather("wood"), result, "No wood to gather here.");

        run(&mut v, &mut w, "Cy", goto("grove"));
        let (o, fb) = run(&mut v, &mut w, "Cy", gather("wood"));
        assert_eq!(fb, ["You gathered 1 wood. Inventory: {'berry': 3, 'wood': 1}"]);
        assert_eq!(o.result_json(), json!({"resource": "wood", "amount": 1, "source": "location", "position": [1, 4]}));
        let result = json!({"error": "depleted", "resource": "wood"});
        cannot(&mut v, &mut w, gather("wood").with("amount", "-1"), result, "wood is depleted.");
        let (_, fb) = run(&mut v, &mut w, "Cy", gather("berry").with("amount", "2"));
        assert_eq!(fb, ["You gathered 2 berry. Inventory: {'berry': 5, 'wood': 1}"]);
        let (o, fb) = run(&mut v, &mut w, "Cy", gather("wood").with("amount", "4"));
        assert_eq!(fb, ["You gathered 1 wood. Inventory: {'berry': 5, 'wood': 2}"]);
        assert_eq!(o.result_json()["amount"], 1);
        let (_, fb) = run(&mut v, &mut w, "Cy", gather("wood"));
        assert_eq!(fb, ["No wood to gather here."]);
        assert_eq!(prop(&w, "Cy", "inventory"), &json!({"berry": 5, "wood": 2}));
        // The stocks travel in the serialised map (as upstream's after the same sequence).
        let map = serde_json::to_value(v.map()).unwrap();
        assert_eq!(map["tiles"][7]["resources"], json!({"berry": 0}));
        assert_eq!(map["locations"][2]["resources"], json!({"wood": 0, "berry": 3}));
        assert_eq!(map["locations"][3]["resources"], json!({"berry": 9}));

        let result = json!({"error": "not_available", "resource": null});
        cannot(&mut v, &mut w, ActionCall::new("gather_resource"), result, "No None to gather here.");
        assert!(act(&mut v, &mut w, "Cy", gather("wood").with("amount", "lots")).is_err());
        w.agents[2].properties.remove("map_xy");
        w.agents[2].properties.insert("map_position".into(), json!("nowhere"));
        let told = "Current position unknown; cannot gather.";
        cannot(&mut v, &mut w, gather("wood"), json!({"error": "unknown_position"}), told);
    }

    #[test]
    fn gathering_in_a_clone_leaves_the_original_map_alone() {
        let (v, mut w) = setup();
        let mut fork = v.clone();
        assert!(Arc::ptr_eq(&v.config.map, &fork.config.map), "a clone shares the map");
        run(&mut fork, &mut w, "Cy", xy(0, 5));
        run(&mut fork, &mut w, "Cy", ActionCall::new("gather_resource").with("resource", "berry"));
        assert!(!Arc::ptr_eq(&v.config.map, &fork.config.map));
        assert_eq!(v.map().tile((0, 5)).unwrap().resources["berry"], 3);
        assert_eq!(fork.map().tile((0, 5)).unwrap().resources["berry"], 2);
    }

    #[test]
    fn rest_restores_more_in_buildings_up_to_100() {
        let (mut v, mut w) = setup();
        w.agents[1].properties.insert("energy".into(), json!(50));
        let (o, fb) = run(&mut v, &mut w, "Bob", ActionCall::new("rest"));
        assert_eq!(fb, ["You rest comfortably in hall."]);
        assert_eq!(o.result_json(), json!({"energy_gain": 30, "new_energy": 80}));
        assert_eq!(o.summary.as_deref(), Some("Bob rested (+30 energy)"));
        assert!(o.success && !o.pass_control);
        let (o, _) = run(&mut v, &mut w, "Bob", ActionCall::new("rest"));
        assert_eq!(o.result_json(), json!({"energy_gain": 30, "new_energy": 100}));
        assert_eq!(prop(&w, "Bob", "energy"), &json!(100));

        w.agents[0].properties.insert("energy".into(), json!(20));
        let (o, fb) = run(&mut v, &mut w, "Ann", ActionCall::new("rest"));
        assert_eq!(fb, ["You take a short rest at well."]);
        assert_eq!(o.result_json(), json!({"energy_gain": 15, "new_energy": 35}));
        assert_eq!(o.summary.as_deref(), Some("Ann rested (+15 energy)"));
        let (o, fb) = run(&mut v, &mut w, "Dee", ActionCall::new("rest"));
        assert_eq!(fb, ["You take a short rest at this spot."]);
        assert_eq!(o.result_json(), json!({"energy_gain": 15, "new_energy": 100}));
    }

    #[test]
    fn post_turn_advances_an_hour_and_warns_about_hunger_and_fatigue() {
        let (mut v, mut w) = setup();
        v.post_turn(0, &mut w);
        assert_eq!(v.time(), 60);
        assert_eq!((prop(&w, "Ann", "hunger"), prop(&w, "Ann", "energy")), (&json!(3), &json!(98)));
        assert_eq!(prop(&w, "Bob", "hunger"), &json!(0), "only the actor changes");
        assert!(feedback(&mut w).is_empty());

        w.agents[0].properties.insert("hunger".into(), json!(68));
        w.agents[0].properties.insert("energy".into(), json!(32));
        v.post_turn(0, &mut w);
        assert_eq!(
            feedback(&mut w),
            [
                (
                    "Ann".to_string(),
                    "[2:00] Status: You are quite hungry (hunger: 71). Consider finding food.".to_string()
                ),
                (
                    "Ann".to_string(),
                    "[2:00] Status: You are tired (energy: 30). Consider resting or moving less.".to_string()
                ),
            ]
        );
        w.agents[0].properties.insert("hunger".into(), json!(99));
        w.agents[0].properties.insert("energy".into(), json!(1));
        v.post_turn(0, &mut w);
        assert_eq!((prop(&w, "Ann", "hunger"), prop(&w, "Ann", "energy")), (&json!(100), &json!(0)));
        assert_eq!(v.time(), 180);
    }

    #[test]
    fn status_prompt_shows_place_needs_inventory_and_clock() {
        let (mut v, mut w) = setup();
        w.agents[0].properties.insert("inventory".into(), json!({"wood": 2, "it's": 1}));
        assert_eq!(
            v.status_prompt(&w.agents[0]),
            "\n--- Status ---\nCurrent position: well at (1,1)\nHunger level: 0\nEnergy level: 100\nInventory: {'wood': 2, \"it's\": 1}\nCurrent time: 0:00 (day)\n"
        );
        v.set_time(19 * 60 + 5 + 24 * 60);
        assert!(v.status_prompt(&w.agents[2]).contains("Current position: 1,3 at (1,3)\n"));
        assert!(v.status_prompt(&w.agents[2]).ends_with("Current time: 19:05 (night)\n"));
        w.agents[2].properties.remove("map_xy");
        assert!(v.status_prompt(&w.agents[2]).contains("Current position: 1,3 at (None,None)\n"));
    }

    #[test]
    fn messages_reach_only_agents_in_range() {
        let mut agents =
            vec![agent_at("Ann", Some([1, 1])), agent_at("Bob", Some([6, 1])), agent_at("Eve", Some([7, 5]))];
        agents.push(agent_at("Gus", Some([0, 0])));
        let (mut v, mut w) = build(json!({"map": map_json()}), agents);
        w.agents[3].properties.remove("map_xy");
        let event = SceneEvent::Message { sender: "Ann".into(), message: "hi".into() };
        v.deliver_message(&event, 0, &mut w);
        w.flush_pending();
        let out = w.take_out();
        assert!(out.iter().all(|e| e.kind == EventType::AgentCtxDelta), "no system_broadcast");
        let heard: Vec<&str> = out.iter().map(|e| e.data["agent"].as_str().unwrap()).collect();
        assert_eq!(heard, ["Ann", "Bob", "Gus"], "Bob at 5 hears, Eve at 10 does not, Gus has no position");
        assert_eq!(out[0].data["content"], "[0:00] [Message] Ann: hi");
    }

    #[test]
    fn talk_to_respects_the_chat_range() {
        let (mut v, mut w) = build(
            json!({"map": map_json(), "chat_range": 3}),
            vec![agent_at("Ann", Some([1, 1])), agent_at("Cy", Some([1, 3])), agent_at("Eve", Some([7, 5]))],
        );
        let talk = |to: &str| ActionCall::new("talk_to").with("to", to).with("message", "hello");
        let (o, fb) = run(&mut v, &mut w, "Ann", talk("Eve"));
        assert_eq!(fb, ["Eve is too far to talk to."]);
        assert!(!o.success);
        let o = act(&mut v, &mut w, "Ann", talk("Cy")).unwrap();
        assert!(o.success);
        assert_eq!(o.summary.as_deref(), Some("Ann to Cy: hello"));
        let lines = feedback(&mut w);
        assert_eq!(
            lines,
            [
                ("Ann".to_string(), "[0:00] Ann to Cy: hello".to_string()),
                ("Cy".to_string(), "[0:00] Ann to Cy: hello".to_string())
            ]
        );
    }

    #[test]
    fn prompt_text_carries_the_map_phrase_and_two_examples() {
        let (v, _) = setup();
        let t = v.text();
        assert!(t.description.contains("grid-based virtual village of 8x6 cells"));
        assert!(t.description.contains("multiplied by 1.") && t.description.contains("distance of 5."));
        assert!(t.examples.contains("<Action name=\"move_to_location\"><location>farm</location></Action>"));
        assert!(t.examples.contains("<Action name=\"talk_to\"><to>Lyra</to>"));
        let all = format!("{}{}{}", t.description, t.guidelines, t.examples).to_lowercase();
        assert_eq!(crate::llm::mock::trigger_words_in(&all), ["grid-based virtual village"], "only the village phrase");
        assert!(!all.contains("you are"));
        use ActionKind::*;
        assert_eq!(
            v.scene_actions(&Agent::new("x", vec![])),
            [TalkTo, MoveToLocation, LookAround, GatherResource, Rest, Yield]
        );
        assert_eq!(v.chat_range(), Some(5));
    }

    #[test]
    fn absurd_numbers_fail_cleanly_instead_of_overflowing() {
        let map = json!({"width": 3, "height": 1, "tiles": [{"x": 1, "y": 0, "movement_cost": i64::MAX}]});
        let (mut v, mut w) =
            build(json!({"map": map}), vec![agent_at("A", Some([0, 0])), agent_at("B", Some([i64::MIN, 0]))]);
        let (o, fb) = run(&mut v, &mut w, "A", xy(2, 0));
        assert_eq!(o.result_json()["error"], "low_energy");
        assert_eq!(fb, [format!("Not enough energy. Moving to (2, 0) costs {}, you have 100.", i64::MAX)]);
        let (o, _) = run(&mut v, &mut w, "A", xy(i64::MAX, i64::MIN));
        assert_eq!(o.result_json()["error"], "no_path");
        let (o, _) = run(&mut v, &mut w, "A", ActionCall::new("look_around").with("radius", i64::MAX.to_string()));
        assert!(o.success);
        let (o, _) = run(
            &mut v,
            &mut w,
            "A",
            ActionCall::new("gather_resource").with("resource", "x").with("amount", i64::MIN.to_string()),
        );
        assert_eq!(o.result_json()["error"], "not_available");
        v.deliver_message(&SceneEvent::Speak { sender: "B".into(), message: "far".into() }, 1, &mut w);
        assert_eq!(feedback(&mut w).len(), 1, "only the speaker, the listener is astronomically far");
    }

    #[test]
    fn python_reprs() {
        assert_eq!(py_repr(&json!({"wood": 2, "a": [1, "b", null, true]})), "{'wood': 2, 'a': [1, 'b', None, True]}");
        assert_eq!(py_repr(&json!({})), "{}");
        assert_eq!(py_repr(&json!("it's")), "\"it's\"");
        assert_eq!(py_repr(&json!("a'b\"c\n")), "'a\\'b\"c\\n'");
        assert_eq!(py_repr(&json!(2.0)), "2.0");
        assert_eq!(py_repr(&json!(0.5)), "0.5");
        assert_eq!(py_repr(&json!(1e20)), "1e+20");
        assert_eq!(py_repr(&json!(1.5e-5)), "1.5e-05");
        assert_eq!(py_str(&json!("plain")), "plain");
    }

    #[test]
    fn scenario_file_builds_the_upstream_village() {
        let s = Scenario::shipped("village");
        assert_eq!(s.default_turns, 40);
        let sim = s.build(None).unwrap();
        assert_eq!(sim.world.names(), ["Elias Thorne", "Seraphina", "Kaelen", "Lyra"]);
        let Scene::Village(v) = &sim.scene else { panic!("not a village") };
        assert_eq!((v.map().width, v.map().height), (20, 20));
        let names: Vec<&str> = v.map().locations().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "village_center",
                "house_1",
                "house_2",
                "house_3",
                "farm",
                "market",
                "blacksmith",
                "forest",
                "lake",
                "mine",
                "ancient_ruins",
                "waterfall"
            ]
        );
        let farm = v.map().location("farm").unwrap();
        assert_eq!((farm.x, farm.y, farm.resources["apple"], farm.resources["wheat"]), (5, 10, 10, 15));
        assert_eq!(v.map().location("mine").unwrap().resources["stone"], 25);
        use ActionKind::*;
        let actions = [TalkTo, Yield, MoveToLocation, LookAround, GatherResource, Rest];
        assert!(sim.world.agents.iter().all(|a| a.action_space == actions));
        assert_eq!(sim.world.agents[1].properties["map_xy"], json!([18, 12]));
        let first = sim.world.agents[0].short_memory.first().unwrap().content.to_string();
        assert_eq!(
            first,
            "[0:00] Public Event: The sun rises over Silverwood village, bringing whisper of new mysteries.\n[0:00] Public Event: Participants: Elias Thorne, Seraphina, Kaelen, Lyra\n[0:00] Public Event: Word spreads: the village well runs weak, and humming echoes near the ancient ruins after dusk."
        );
    }

    #[test]
    fn mock_run_of_the_village_scenario() {
        let (sim, events) = mock_run("village", 30);
        let summaries = summaries(&events);
        // Everyone looks around on their first call, then only yields.
        assert_eq!(
            summaries[..3],
            ["Elias Thorne looked around (r=5)", "Elias Thorne yielded the floor", "Seraphina looked around (r=5)"]
        );
        assert_eq!(summaries.iter().filter(|s| s.contains("looked around")).count(), 4);
        assert_eq!(summaries.len(), 34);
        let elias_look = events
            .iter()
            .find(|e| {
                e.kind == EventType::AgentCtxDelta && e.data["content"].as_str().unwrap().starts_with("You are at")
            })
            .unwrap();
        let text = elias_look.data["content"].as_str().unwrap();
        assert!(
            text.starts_with("You are at (3,3): plain\nNearby locations:\n  - waterfall (distance: 2) - "),
            "{text}"
        );
        assert!(text.contains("\n  - forest (distance: 2) - "));
        assert_eq!(sim.scene.rules().time(), 30 * 60);
        let elias = &sim.world.agents[0];
        // 8 turns each for the first two villagers, 7 for the others.
        assert_eq!((&elias.properties["hunger"], &elias.properties["energy"]), (&json!(24), &json!(84)));
        let status = events
            .iter()
            .find(|e| {
                e.kind == EventType::AgentCtxDelta && e.data["content"].as_str().unwrap().contains("--- Status ---")
            })
            .unwrap();
        assert_eq!(
            status.data["content"],
            "[0:00] Status: \n--- Status ---\nCurrent position: 3,3 at (3,3)\nHunger level: 0\nEnergy level: 100\nInventory: {}\nCurrent time: 0:00 (day)\n"
        );
    }
}
