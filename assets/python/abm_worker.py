#!/usr/bin/env python3
"""simtree's ABM worker: runs sd-ai abm-quant models on real Mesa 3, one JSON request per line.

The Rust server starts this script as a long-lived child process (see server/src/abm/worker.rs)
and never runs model code itself. Each request is one line of JSON on stdin, each answer one line
on the original stdout; anything model code prints goes to stderr.

The first line the worker writes is {"ready": true, "pid": P}, once its imports are done.
Requests (every one carries an "id" echoed in the answer):
  {"op": "ping"}
  {"op": "load", "handle": H, "model": {...abm-quant model...}, "seed": S}
  {"op": "restore", "handle": H, "data": BASE64}        a snapshot taken by "snapshot"
  {"op": "step", "handle": H, "n": N}                   up to N steps (fewer if the model ends)
  {"op": "snapshot", "handle": H}                       -> {"data": BASE64} (a pickle)
  {"op": "set", "handle": H, "patch": {"target": "globalVariable" | "environmentAttribute" |
        "agentAttribute", "name": ..., "value": ..., "agentType": ..., "agentId": ...}}
  {"op": "reseed", "handle": H, "seed": S}
  {"op": "info", "handle": H}
  {"op": "collect", "handle": H}                        -> {"values": tracked variables now}
  {"op": "drop", "handle": H}
  {"op": "bench", "kind": "python_loop" | "bare_mesa_sir", ...}   reference timings
  {"op": "hook", "source": PY, "hook": NAME, "state": {...}, "arg": ..., "seed": S, "cpu_seconds": N}
        -> {"effects": what the custom scene's hook NAME returned (JSON), or null}
  {"op": "hook_check", "source": PY}
        -> {"defines": [top-level function names]} or {"syntax": {"line", "message"}}
Answers: {"id", "ok": true, ...} or {"id", "ok": false, "error": {"kind", "message",
"traceback"?}} with kind one of bad_request, unknown_model, poisoned, model_error, spec_error,
cpu_limit, memory_limit, internal.

How a model runs (the format leaves these open; the choices are documented in
assets/abm/README.md):
  * every code string is exec'd in a per-model namespace holding globalVariable (a namespace of
    values stored on the model, so it is pickled and branches independently), globalFunction,
    environment, model, math, np, nx, mesa and `random` bound to the model's seeded generator;
  * agents are one class, DynAgent, tagged with their type; behaviors are called as fn(agent);
    `self.<behavior>()` works too;
  * model.schedule is a shim for Mesa-2 code (time, steps, agents, get_agent_count, add, remove)
    with Mesa 2's numbering (time is 0 during the first step); mesa.time is provided if missing;
    grids accept get_neighbors(pos, include_center=...) without `moore` (Moore by default);
  * a step runs the schedule entries in orderInSchedule; agent behaviors visit the agents of their
    type in a fresh random order; then tracked variables are collected and termination checked.
Limits: RLIMIT_AS caps the worker's memory (MemoryError), and each call gets a CPU-time budget
through a soft RLIMIT_CPU whose SIGXCPU raises inside the model code. A model whose call failed
is "poisoned": only drop (or a restore over it) is accepted afterwards.

Sandbox: the server normally starts this script inside bubblewrap (server/src/abm/sandbox.rs),
in a PID namespace of its own where it is PID 2. There `--reap-strays` makes it SIGKILL every
other process of the namespace after each call (before answering), so processes that model code
forks, even detached ones, never outlive the call. Outside such a namespace the flag is refused:
kill(-1) would reach every process of the user. `--scratch DIR` empties DIR (the sandbox's own
/tmp) after each call: a model's state is its snapshot, never files left behind.

Model code may not start processes or call C functions: an audit hook (installed once the
imports are done, for the worker's whole life) refuses fork, exec, spawn, system, subprocess,
ctypes' foreign calls and the gc module's object walks that could dig the originals back up,
with a clear message. The walls are in the kernel: the sandbox's seccomp filters (see
server/src/abm/seccomp.rs) refuse new processes, ptrace and non-Unix sockets from the start, and
`--exec-filter-fd FD` makes the worker install one more that refuses execve, before its first
request. The server's per-worker pids cgroup, where the machine has one, is a last cap.
"""

import os
import sys

# Before numpy loads: one BLAS thread (threads reserve address space that RLIMIT_AS counts).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import base64  # noqa: E402
import builtins  # noqa: E402
import copy  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import random as _random_module  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

import mesa  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from mesa.space import MultiGrid, NetworkGrid  # noqa: E402

warnings.simplefilter("ignore")

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
REF_PATTERNS = [
    ("globalVariable", re.compile(rf"^globalVariable\.({IDENT})$")),
    ("globalFunction", re.compile(rf"^globalFunction\.({IDENT})$")),
    ("environmentAttribute", re.compile(rf"^environment\.environmentAttribute\.({IDENT})$")),
    ("environmentBehavior", re.compile(rf"^environment\.environmentBehavior\.({IDENT})$")),
    ("agentAttribute", re.compile(rf"^agent\.({IDENT})\.agentAttribute\.({IDENT})$")),
    ("agentBehavior", re.compile(rf"^agent\.({IDENT})\.agentBehavior\.({IDENT})$")),
    ("initialCount", re.compile(rf"^agent\.({IDENT})\.initialCount$")),
]
FRAMEWORK_REF = re.compile(rf"^(self|model)(\.{IDENT})+$")
# Attributes Mesa owns on an agent; a model may not declare them as agent attributes.
RESERVED_AGENT_ATTRS = {"model", "unique_id", "random", "rng", "agent_type", "remove"}


def parse_ref(text):
    """(kind, *names) for a sourceName, or None."""
    if not isinstance(text, str):
        return None
    for kind, pattern in REF_PATTERNS:
        m = pattern.match(text)
        if m:
            return (kind,) + m.groups()
    return None


class SpecError(Exception):
    """The model specification cannot be run as written (reported as spec_error)."""


class UnknownModel(Exception):
    """A request named a handle this worker does not hold."""


class Poisoned(Exception):
    """A request named a model whose earlier call failed part-way."""


class PatchError(Exception):
    """A patch names something the model does not have."""


class CpuLimitExceeded(BaseException):
    """Raised by the SIGXCPU handler; a BaseException so `except Exception` in model code
    does not swallow it."""


def _on_sigxcpu(signum, frame):
    raise CpuLimitExceeded()


# ---------------------------------------------------------------------------------------------
# Mesa-2 compatibility
# ---------------------------------------------------------------------------------------------


class ScheduleShim:
    """model.schedule for Mesa-2-style code. Mesa 2's schedule.time was 0 during the first step
    and advanced at its end; Mesa 3's model.steps is already 1 then, hence the -1 inside a step."""

    def __init__(self, model):
        self._model = model

    @property
    def time(self):
        m = self._model
        return m.steps - 1 if m._in_step else m.steps

    @property
    def steps(self):
        return self.time

    @property
    def agents(self):
        return list(self._model.agents)

    def get_agent_count(self):
        return len(self._model.agents)

    def add(self, agent):
        # Mesa 3 registers agents when they are created.
        pass

    def remove(self, agent):
        agent.remove()

    @property
    def agents_by_type(self):
        out = {}
        for a in self._model.agents:
            out.setdefault(getattr(a, "agent_type", type(a).__name__), []).append(a)
        return out


def _install_mesa_time_shim():
    """Provide mesa.time (removed in Mesa 3.1+) so that `from mesa.time import ...` in model code
    does not fail. The runner drives the schedule itself; these classes only keep old code
    importable and usable."""
    try:
        importlib.import_module("mesa.time")
        return
    except ImportError:
        pass

    class BaseScheduler:
        def __init__(self, model, agents=None):
            self.model = model
            self._agents = list(agents or [])
            self.steps = 0
            self.time = 0

        def add(self, agent):
            if agent not in self._agents:
                self._agents.append(agent)

        def remove(self, agent):
            if agent in self._agents:
                self._agents.remove(agent)

        @property
        def agents(self):
            return list(self._agents)

        def get_agent_count(self):
            return len(self._agents)

        def _order(self):
            return list(self._agents)

        def step(self):
            for a in self._order():
                a.step()
            self.steps += 1
            self.time += 1

    class RandomActivation(BaseScheduler):
        def _order(self):
            agents = list(self._agents)
            self.model.random.shuffle(agents)
            return agents

    class SimultaneousActivation(BaseScheduler):
        def step(self):
            for a in self._order():
                a.step()
            for a in self._order():
                a.advance()
            self.steps += 1
            self.time += 1

    mod = types.ModuleType("mesa.time")
    mod.BaseScheduler = BaseScheduler
    mod.RandomActivation = RandomActivation
    mod.SimultaneousActivation = SimultaneousActivation
    mod.StagedActivation = BaseScheduler
    mod.RandomActivationByType = RandomActivation
    sys.modules["mesa.time"] = mod
    mesa.time = mod


_install_mesa_time_shim()


class CompatMultiGrid(MultiGrid):
    """MultiGrid whose neighbourhood queries default to Moore (Mesa 3 made `moore` required)."""

    def get_neighbors(self, pos, moore=True, include_center=False, radius=1):
        return super().get_neighbors(pos, moore, include_center, radius)

    def get_neighborhood(self, pos, moore=True, include_center=False, radius=1):
        return super().get_neighborhood(pos, moore, include_center, radius)

    def iter_neighbors(self, pos, moore=True, include_center=False, radius=1):
        return super().iter_neighbors(pos, moore, include_center, radius)

    def iter_neighborhood(self, pos, moore=True, include_center=False, radius=1):
        return super().iter_neighborhood(pos, moore, include_center, radius)


# ---------------------------------------------------------------------------------------------
# Agents, environment, model
# ---------------------------------------------------------------------------------------------


class DynAgent(mesa.Agent):
    """One class for every agent type (a generated class per type would not pickle by
    reference); the type is a tag and behaviors are looked up on the model."""

    def __init__(self, model, agent_type):
        super().__init__(model)
        self.agent_type = agent_type

    def __getattr__(self, name):
        # Only reached for missing attributes: `self.move()` from another behavior.
        if name.startswith("_"):
            raise AttributeError(name)
        model = self.__dict__.get("model")
        kind = self.__dict__.get("agent_type")
        if model is not None and "_agent_beh" in model.__dict__:
            fn = model._agent_beh.get((kind, name))
            if fn is not None:
                return types.MethodType(fn, self)
        raise AttributeError(f"{kind} agent has no attribute '{name}'")

    def remove(self):
        grid = getattr(self.model, "grid", None)
        if grid is not None and self.pos is not None:
            grid.remove_agent(self)
        super().remove()

    def __repr__(self):
        return f"<{self.agent_type} {self.unique_id}>"


class Environment:
    """The environment object: attributes as Python attributes, behaviors as methods."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        model = self.__dict__.get("model")
        if model is not None and "_env_beh" in model.__dict__:
            fn = model._env_beh.get(name)
            if fn is not None:
                return types.MethodType(fn, self)
        raise AttributeError(f"the environment has no attribute '{name}'")


class RandomProxy:
    """What `import random` gives model code: the module's functions, bound to the model's
    seeded generator (so results are reproducible and travel in snapshots)."""

    def __init__(self, rng):
        self._rng = rng

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        rng = self.__dict__.get("_rng")
        if rng is not None and hasattr(rng, name):
            return getattr(rng, name)
        return getattr(_random_module, name)


class SpecModel(mesa.Model):
    """A Mesa model built from an abm-quant specification."""

    def __init__(self, spec, seed):
        super().__init__(seed=seed)
        self.spec = spec
        self.warnings = []
        self.globalVariable = types.SimpleNamespace()
        self.environment = Environment(self)
        self.grid = None
        self.G = None
        self.terminated = None
        self.poisoned = None
        self._in_step = False
        self._pending = []
        self._record = {}
        self._compile()
        self._index_spec()
        self._initialize()

    # -- pickling: code objects stay out, the spec comes back in --

    def __getstate__(self):
        state = self.__dict__.copy()
        for key in ("_ns", "_gf", "_env_beh", "_agent_beh", "globalFunction", "_random_proxy", "_plans"):
            state.pop(key, None)
        # Mesa keeps the agent-id counter outside the model; carry its position along.
        counter = mesa.Agent._ids[self]
        nxt = next(counter)
        mesa.Agent._ids[self] = itertools.count(nxt)
        state["_uid_next"] = nxt
        return state

    def __setstate__(self, state):
        nxt = state.pop("_uid_next", None)
        self.__dict__.update(state)
        if nxt is not None:
            mesa.Agent._ids[self] = itertools.count(nxt)
        self.warnings = []
        self._compile()
        self._index_spec()

    def forget(self):
        """Release Mesa's class-level reference to this model (its id counter)."""
        mesa.Agent._ids.pop(self, None)

    # -- conveniences for model code (and Mesa 2 idioms) --

    @property
    def schedule(self):
        return ScheduleShim(self)

    @property
    def time(self):
        return self.steps

    @property
    def space(self):
        return self.grid

    @property
    def network(self):
        return self.G

    def next_id(self):
        return max((a.unique_id for a in self.agents), default=0) + 1

    def create_agent(self, agent_type, **attributes):
        """Creates an agent of a declared type with its declared initial values (overridden by
        `attributes`) and places it; for births in model code."""
        if agent_type not in self._types:
            raise SpecError(f"unknown agent type '{agent_type}'")
        agent = self._new_agent(agent_type)
        for k, v in attributes.items():
            setattr(agent, k, v)
        self._pending.append(agent)
        self._place_pending()
        return agent

    def agents_of(self, agent_type):
        return [a for a in self.agents if getattr(a, "agent_type", None) == agent_type]

    def __getattr__(self, name):
        # Reached only for missing attributes: lets code read model.<globalVariable>.
        if name.startswith("_"):
            raise AttributeError(name)
        gv = self.__dict__.get("globalVariable")
        if gv is not None and name in gv.__dict__:
            return gv.__dict__[name]
        raise AttributeError(f"the model has no attribute '{name}'")

    def warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)

    # -- compilation --

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random":
            return self._random_proxy
        return builtins.__import__(name, globals, locals, fromlist, level)

    def _compile(self):
        spec = self.spec
        self._random_proxy = RandomProxy(self.random)
        self._plans = {}
        own_builtins = dict(vars(builtins))
        own_builtins["__import__"] = self._import
        self._gf = {}
        self.globalFunction = types.SimpleNamespace()
        self._ns = {
            "__builtins__": own_builtins,
            "__name__": "abm_model",
            "globalVariable": self.globalVariable,
            "globalFunction": self.globalFunction,
            "environment": self.environment,
            "model": self,
            "math": math,
            "random": self._random_proxy,
            "np": np,
            "numpy": np,
            "nx": nx,
            "networkx": nx,
            "mesa": mesa,
        }
        for f in spec.get("globalFunctions") or []:
            fn = self._compile_one(f["code"], f["name"], f.get("sourceName") or f["name"])
            self._gf[f["name"]] = fn
        self._env_beh = {}
        env = spec.get("environment") or {}
        for b in env.get("environmentBehaviors") or []:
            self._env_beh[b["name"]] = self._compile_one(b["code"], b["name"], b["sourceName"])
        self._agent_beh = {}
        for group in spec.get("agents") or []:
            for t in group:
                kind = agent_type_name(t)
                for b in t.get("agentBehaviors") or []:
                    fn = self._compile_one(b["code"], b["name"], b["sourceName"])
                    self._agent_beh[(kind, b["name"])] = fn
        # Global functions win the bare names (behaviors of different types may share a name).
        for name, fn in self._gf.items():
            setattr(self.globalFunction, name, fn)
            self._ns[name] = fn

    def _compile_one(self, code, expected, source_name):
        filename = f"<{source_name}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            compiled = compile(code, filename, "exec")
        except SyntaxError as e:
            raise SpecError(f"{source_name}: syntax error on line {e.lineno}: {e.msg}") from None
        before = {k: id(v) for k, v in self._ns.items()}
        exec(compiled, self._ns)
        defined = [
            v
            for k, v in self._ns.items()
            if isinstance(v, types.FunctionType)
            and before.get(k) != id(v)
            and v.__code__.co_filename == filename
        ]
        for fn in defined:
            if fn.__name__ == expected:
                return fn
        if defined:
            self.warn(f"{source_name}: code defines {defined[-1].__name__}(), not {expected}(); using it")
            return defined[-1]
        raise SpecError(f"{source_name}: the code defines no function")

    def _index_spec(self):
        spec = self.spec
        self._gv_decl = {v["name"]: v for v in spec.get("globalVariables") or []}
        env = spec.get("environment") or {}
        self._env_decl = {v["name"]: v for v in env.get("environmentAttributes") or []}
        self._types = {}
        for group in spec.get("agents") or []:
            for t in group:
                kind = agent_type_name(t)
                if kind is None:
                    raise SpecError("an agent type has no sourceName naming it (agent.<Type>....)")
                self._types[kind] = t
        self._attr_decl = {
            kind: {a["name"]: a for a in t.get("agentAttributes") or []}
            for kind, t in self._types.items()
        }
        topo = env.get("topology") or {}
        self._topology = topo.get("type", "none")
        self._torus = topo.get("boundaryConditions") == "torus"
        sched = (spec.get("scheduler") or {}).get("schedule") or {}
        self._schedule = sorted(
            sched.get("scheduleOrder") or [], key=lambda i: _order_key(i.get("orderInSchedule"))
        )
        crit = spec.get("terminationCriteria") or {}
        self._max_steps = crit.get("maxSteps")
        self._rules = crit.get("terminationRules") or []
        analytics = spec.get("dataAnalytics") or {}
        self._tracked = analytics.get("trackedVariables") or []

    # -- values --

    def _resolve_function(self, name, ctx):
        """The function a {"function": name} value calls, or a fallback with a warning."""
        ref = parse_ref(name)
        if ref and ref[0] == "globalFunction":
            name = ref[1]
        elif ref and ref[0] == "environmentBehavior":
            name = ref[1]
        elif ref and ref[0] == "agentBehavior":
            return self._agent_beh.get((ref[1], ref[2]))
        if name in self._gf:
            return self._gf[name]
        if name in self._env_beh:
            return self._env_beh[name]
        kind = getattr(ctx, "agent_type", None)
        if (kind, name) in self._agent_beh:
            return self._agent_beh[(kind, name)]
        # LLMs write getX() for a global variable x that has no getter.
        if name.startswith("get") and len(name) > 3:
            var = name[3].lower() + name[4:]
            if var in self._gv_decl:
                self.warn(f"function {name} is not defined; using globalVariable.{var} instead")
                return lambda *args, _v=var: getattr(self.globalVariable, _v)
        raise SpecError(f"function '{name}' is not defined")

    def _context_for(self, param, ctx):
        if param in ("model", "m"):
            return self
        if param in ("env", "environment", "world"):
            return self.environment
        if param == "agents":
            return list(self.agents)
        return ctx

    def _call(self, fn, args, ctx):
        """Calls fn, passing the context object first when the call is short of arguments: the
        agent for a behavior, the environment, or the model (or the agents) as the first
        parameter's name asks."""
        plan = self._plans.get(fn)
        if plan is None:
            plan = self._plans[fn] = call_plan(fn)
        required, first = plan
        if len(args) < required:
            return fn(self._context_for(first, ctx), *args)
        return fn(*args)

    def _read_ref(self, ref, ctx, text):
        kind = ref[0]
        if kind == "globalVariable":
            if not hasattr(self.globalVariable, ref[1]):
                raise SpecError(f"{text} is used before it has a value")
            return getattr(self.globalVariable, ref[1])
        if kind == "environmentAttribute":
            if ref[1] not in self.environment.__dict__:
                raise SpecError(f"{text} is used before it has a value")
            return self.environment.__dict__[ref[1]]
        if kind == "agentAttribute":
            if getattr(ctx, "agent_type", None) == ref[1]:
                return getattr(ctx, ref[2])
            return [getattr(a, ref[2], None) for a in self.agents_of(ref[1])]
        if kind == "initialCount":
            return len(self.agents_of(ref[1]))
        if kind == "globalFunction":
            return self._gf.get(ref[1])
        raise SpecError(f"{text} cannot be used as a value")

    def _eval(self, value, ctx, vtype=None):
        if isinstance(value, dict) and "function" in value:
            fn = self._resolve_function(value["function"], ctx)
            if fn is None:
                raise SpecError(f"function '{value['function']}' is not defined")
            args = [self._eval(a, ctx) for a in value.get("args") or []]
            return self._call(fn, args, ctx)
        if isinstance(value, str):
            ref = parse_ref(value)
            if ref is not None:
                return self._read_ref(ref, ctx, value)
            if FRAMEWORK_REF.match(value):
                parts = value.split(".")
                obj = ctx if parts[0] == "self" else self
                for p in parts[1:]:
                    obj = getattr(obj, p)
                return obj
            if vtype in ("array", "object"):
                try:
                    parsed = json.loads(value)
                    if isinstance(parsed, (list, dict)):
                        return parsed
                except ValueError:
                    pass
            if vtype in ("integer", "float", "number"):
                try:
                    return int(value) if vtype == "integer" else float(value)
                except ValueError:
                    pass
            return value
        return copy.deepcopy(value)

    # -- initialization --

    def _new_agent(self, kind):
        agent = DynAgent(self, kind)
        desired = None
        for attr in self._types[kind].get("agentAttributes") or []:
            name = attr["name"]
            if name in RESERVED_AGENT_ATTRS:
                raise SpecError(f"agent attribute '{name}' of {kind} clashes with Mesa's own")
            value = self._eval(attr.get("initialValue"), agent, attr.get("type"))
            if name == "pos":
                desired = value
                continue
            if name == "position" and desired is None:
                desired = value
            setattr(agent, name, value)
        agent._desired_pos = desired
        return agent

    def _create_agents(self, kind, count):
        try:
            n = int(count)
        except (TypeError, ValueError):
            raise SpecError(f"initialCount of {kind} is not a number: {count!r}") from None
        if n < 0:
            raise SpecError(f"initialCount of {kind} is negative: {n}")
        for _ in range(n):
            self._pending.append(self._new_agent(kind))

    def _initialize(self):
        # Literal values first: anything may refer to them, in any order.
        for decl, target in ((self._gv_decl, self.globalVariable), (self._env_decl, self.environment)):
            for name, v in decl.items():
                iv = v.get("initialValue")
                if not (isinstance(iv, dict) or (isinstance(iv, str) and (parse_ref(iv) or FRAMEWORK_REF.match(iv)))):
                    setattr(target, name, self._eval(iv, self, v.get("type")))
        init = (self.spec.get("scheduler") or {}).get("initialization") or {}
        items = sorted(
            init.get("initializationOrder") or [],
            key=lambda i: _order_key(i.get("orderInInitialization")),
        )
        done_gv, done_env, created = set(), set(), set()
        for item in items:
            sn = item.get("sourceName")
            ref = parse_ref(sn)
            if ref is None:
                self.warn(f"initialization entry {sn!r} is not a sourceName; skipped")
                continue
            kind = ref[0]
            if kind == "globalVariable" and ref[1] in self._gv_decl:
                v = self._gv_decl[ref[1]]
                setattr(self.globalVariable, ref[1], self._eval(v.get("initialValue"), self, v.get("type")))
                done_gv.add(ref[1])
            elif kind == "environmentAttribute" and ref[1] in self._env_decl:
                v = self._env_decl[ref[1]]
                setattr(self.environment, ref[1], self._eval(v.get("initialValue"), self.environment, v.get("type")))
                done_env.add(ref[1])
            elif kind == "initialCount" and ref[1] in self._types:
                if ref[1] in created:
                    self.warn(f"{sn} appears twice in the initialization; created once")
                    continue
                self._create_agents(ref[1], self._eval(self._types[ref[1]].get("initialCount"), self, "integer"))
                created.add(ref[1])
            elif kind == "agentAttribute" and ref[2] in self._attr_decl.get(ref[1], {}):
                decl = self._attr_decl[ref[1]][ref[2]]
                for a in self.agents_of(ref[1]):
                    setattr(a, ref[2], self._eval(decl.get("initialValue"), a, decl.get("type")))
            elif kind == "globalFunction" and ref[1] in self._gf:
                self._place_pending()
                self._call(self._gf[ref[1]], [], self)
            else:
                self.warn(f"initialization entry {sn} does not name a declared element; skipped")
        # Whatever the order left out, in declaration order.
        for name, v in self._gv_decl.items():
            if name not in done_gv and not hasattr(self.globalVariable, name):
                setattr(self.globalVariable, name, self._eval(v.get("initialValue"), self, v.get("type")))
        for name, v in self._env_decl.items():
            if name not in done_env and name not in self.environment.__dict__:
                setattr(self.environment, name, self._eval(v.get("initialValue"), self.environment, v.get("type")))
        for kind, t in self._types.items():
            if kind not in created:
                self._create_agents(kind, self._eval(t.get("initialCount"), self, "integer"))
        self._place_pending()
        for rule in self._rules:
            ref = parse_ref(rule.get("sourceName"))
            if not self._declared(ref):
                self.warn(f"termination rule on {rule.get('sourceName')} ignored: not declared")
        for tv in self._tracked:
            ref = parse_ref(tv.get("sourceName"))
            if not self._declared(ref):
                self.warn(f"tracked variable {tv.get('sourceName')} ignored: not declared")

    def _declared(self, ref):
        if ref is None:
            return False
        if ref[0] == "globalVariable":
            return ref[1] in self._gv_decl
        if ref[0] == "environmentAttribute":
            return ref[1] in self._env_decl
        if ref[0] == "agentAttribute":
            return ref[2] in self._attr_decl.get(ref[1], {})
        if ref[0] == "initialCount":
            return ref[1] in self._types
        return False

    # -- topology --

    def _size_hint(self, names):
        for decl, holder in ((self._gv_decl, self.globalVariable), (self._env_decl, self.environment)):
            for name in decl:
                if name.lower().replace("_", "") in names and hasattr(holder, name):
                    try:
                        return int(getattr(holder, name))
                    except (TypeError, ValueError):
                        pass
        return None

    def _build_network(self, n):
        text = " ".join(
            [
                ((self.spec.get("environment") or {}).get("topology") or {}).get("description", ""),
                (self.spec.get("environment") or {}).get("description", ""),
            ]
        ).lower()
        seed = self.random.randrange(2**31)
        if n < 2:
            return nx.empty_graph(n)
        if "small-world" in text or "small world" in text or "watts" in text:
            k = min(4, n - 1 - ((n - 1) % 2)) or 2
            return nx.watts_strogatz_graph(n, k, 0.1, seed=seed)
        if "complete" in text or "fully connected" in text:
            return nx.complete_graph(n)
        if "ring" in text or "cycle" in text:
            return nx.cycle_graph(n)
        if "erdos" in text or "erdős" in text or "random graph" in text or "random network" in text:
            return nx.gnp_random_graph(n, min(1.0, 6.0 / (n - 1)), seed=seed)
        return nx.barabasi_albert_graph(n, min(3, n - 1), seed=seed)

    def _place_pending(self):
        pending, self._pending = self._pending, []
        if not pending or self._topology == "none":
            return
        if self._topology == "network":
            if self.grid is None:
                self.G = self._build_network(len(pending))
                self.grid = NetworkGrid(self.G)
            free = [n for n in sorted(self.G.nodes) if not self.G.nodes[n].get("agent")]
            for agent in pending:
                if free:
                    node = free.pop(0)
                else:
                    # Grow the network: a new node attached to up to 3 existing ones.
                    node = max(self.G.nodes, default=-1) + 1
                    existing = sorted(self.G.nodes)
                    self.G.add_node(node, agent=[])
                    for other in self.random.sample(existing, min(3, len(existing))):
                        self.G.add_edge(node, other)
                self.grid.place_agent(agent, node)
            return
        # grid
        if self.grid is None:
            total = len(self.agents)
            side = self._size_hint({"gridsize", "size", "side"})
            width = self._size_hint({"width", "gridwidth"}) or side
            height = self._size_hint({"height", "gridheight"}) or side
            if width is None or height is None:
                guess = max(10, math.ceil(math.sqrt(max(total, 1) * 2)))
                width, height = width or guess, height or guess
            self.grid = CompatMultiGrid(width, height, torus=self._torus)
        for agent in pending:
            desired = agent.__dict__.pop("_desired_pos", None)
            pos = None
            if isinstance(desired, (list, tuple)) and len(desired) == 2:
                try:
                    pos = (int(desired[0]), int(desired[1]))
                    if self.grid.out_of_bounds(pos):
                        pos = self.grid.torus_adj(pos) if self.grid.torus else None
                except (TypeError, ValueError):
                    pos = None
            if pos is None:
                pos = self._random_empty_cell()
            self.grid.place_agent(agent, pos)

    def _random_empty_cell(self):
        g = self.grid
        for _ in range(64):
            pos = (self.random.randrange(g.width), self.random.randrange(g.height))
            if g.is_cell_empty(pos):
                return pos
        empties = sorted(g.empties)
        if empties:
            return self.random.choice(empties)
        return (self.random.randrange(g.width), self.random.randrange(g.height))

    # -- stepping --

    def _run_item(self, item):
        sn = item.get("sourceName")
        ref = parse_ref(sn)
        if ref is None:
            raise SpecError(f"schedule entry {sn!r} is not a sourceName")
        kind = ref[0]
        if kind == "agentBehavior":
            fn = self._agent_beh.get((ref[1], ref[2]))
            if fn is None:
                raise SpecError(f"schedule entry {sn} names no declared behavior")
            agents = self.agents_of(ref[1])
            self.random.shuffle(agents)
            alive = self._agents
            plan = self._plans.get(fn)
            if plan is None:
                plan = self._plans[fn] = call_plan(fn)
            if plan[0] == 0:
                for a in agents:
                    if a in alive:
                        fn()
            elif plan[1] in ("model", "m", "env", "environment", "world", "agents"):
                for a in agents:
                    if a in alive:
                        fn(self._context_for(plan[1], a))
            else:
                # The hot loop: one plain call per agent.
                for a in agents:
                    if a in alive:
                        fn(a)
        elif kind == "environmentBehavior":
            fn = self._env_beh.get(ref[1])
            if fn is None:
                raise SpecError(f"schedule entry {sn} names no declared behavior")
            self._call(fn, [], self.environment)
        elif kind == "globalFunction":
            fn = self._gf.get(ref[1])
            if fn is None:
                raise SpecError(f"schedule entry {sn} names no declared function")
            self._call(fn, [], self)
        else:
            raise SpecError(f"schedule entry {sn} is not a behavior or function")

    def step(self):
        self._in_step = True
        try:
            self._record = {}
            self._collect("start-of-step")
            for item in self._schedule:
                self._run_item(item)
            self._collect("end-of-step")
        finally:
            self._in_step = False
        self._check_termination()

    def _collect(self, when):
        for tv in self._tracked:
            if tv.get("checkTime", "end-of-step") != when:
                continue
            ref = parse_ref(tv.get("sourceName"))
            if not self._declared(ref):
                continue
            self._record[tv["sourceName"]] = self.read(ref, tv.get("collectionLevel", "model"))

    def collect_all(self):
        """All tracked variables now (the record of step 0, after initialization)."""
        out = {}
        for tv in self._tracked:
            ref = parse_ref(tv.get("sourceName"))
            if self._declared(ref):
                out[tv["sourceName"]] = self.read(ref, tv.get("collectionLevel", "model"))
        return out

    def read(self, ref, level="model"):
        kind = ref[0]
        if kind == "globalVariable":
            return to_json(getattr(self.globalVariable, ref[1], None))
        if kind == "environmentAttribute":
            return to_json(self.environment.__dict__.get(ref[1]))
        if kind == "initialCount":
            return len(self.agents_of(ref[1]))
        if kind == "agentAttribute":
            agents = sorted(self.agents_of(ref[1]), key=lambda a: a.unique_id)
            values = [to_json(getattr(a, ref[2], None)) for a in agents]
            if level == "agent":
                return values
            return summarize(values)
        return None

    def _check_termination(self):
        if self.terminated:
            return
        for rule in self._rules:
            ref = parse_ref(rule.get("sourceName"))
            if not self._declared(ref):
                continue
            target = coerce(self._eval(rule.get("value"), self), rule.get("type"))
            if ref[0] == "agentAttribute":
                values = [getattr(a, ref[2], None) for a in self.agents_of(ref[1])]
                hit = all(same(v, target) for v in values)
            else:
                hit = same(self.read(ref), target)
            if hit:
                self.terminated = {"reason": "rule", "sourceName": rule.get("sourceName")}
                break
        if not self.terminated and self._max_steps is not None and self.steps >= self._max_steps:
            self.terminated = {"reason": "maxSteps", "sourceName": None}
        if not self.terminated and not self.running:
            self.terminated = {"reason": "running", "sourceName": None}
        if self.terminated:
            self.running = False

    # -- patches --

    def apply_patch(self, patch):
        target = patch.get("target")
        name = patch.get("name")
        value = patch.get("value")
        if target == "globalVariable":
            if name not in self._gv_decl and not hasattr(self.globalVariable, name):
                raise PatchError(f"no global variable '{name}'")
            setattr(self.globalVariable, name, value)
            return 1
        if target == "environmentAttribute":
            if name not in self._env_decl and name not in self.environment.__dict__:
                raise PatchError(f"no environment attribute '{name}'")
            setattr(self.environment, name, value)
            return 1
        if target == "agentAttribute":
            kind = patch.get("agentType")
            if kind not in self._types:
                raise PatchError(f"no agent type '{kind}'")
            if name not in self._attr_decl[kind]:
                raise PatchError(f"agent type {kind} has no attribute '{name}'")
            agents = self.agents_of(kind)
            agent_id = patch.get("agentId")
            if agent_id is not None:
                agents = [a for a in agents if a.unique_id == agent_id]
                if not agents:
                    raise PatchError(f"no {kind} agent with id {agent_id}")
            for a in agents:
                setattr(a, name, copy.deepcopy(value))
            return len(agents)
        raise PatchError(f"unknown patch target '{target}'")

    def reseed(self, seed):
        self.random.seed(seed)
        self._seed = seed
        self.rng = np.random.default_rng(seed)
        self._rng = self.rng.bit_generator.state

    def info(self):
        counts = {}
        for a in self.agents:
            counts[a.agent_type] = counts.get(a.agent_type, 0) + 1
        return {
            "steps": self.steps,
            "terminated": self.terminated,
            "agents": counts,
            "globalVariables": {k: to_json(v) for k, v in vars(self.globalVariable).items()},
            "environmentAttributes": {
                k: to_json(v) for k, v in self.environment.__dict__.items() if k != "model"
            },
            "topology": self._topology,
            "edges": self.G.number_of_edges() if self.G is not None else None,
        }


def call_plan(fn):
    """(number of required positional parameters, name of the first one) of a function;
    inspect.signature is slow, so the model caches this per function."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return (0, None)
    required = sum(1 for p in params if p.default is p.empty)
    return (required, params[0].name if params else None)


def agent_type_name(t):
    for item in (t.get("agentAttributes") or []) + (t.get("agentBehaviors") or []):
        ref = parse_ref(item.get("sourceName"))
        if ref and ref[0] in ("agentAttribute", "agentBehavior"):
            return ref[1]
    return None


def _order_key(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def to_json(v):
    """A JSON-safe copy of a model value."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, np.generic):
        return to_json(v.item())
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((to_json(x) for x in v), key=repr)
    if isinstance(v, dict):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return to_json(v.tolist())
    if isinstance(v, mesa.Agent):
        return {"agent": v.unique_id}
    return repr(v)


def summarize(values):
    """A model-level reading of an agent attribute: the mean of numbers, else counts."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if values and len(nums) == len(values):
        return sum(nums) / len(nums)
    counts = {}
    for v in values:
        key = v if isinstance(v, str) else json.dumps(v)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def coerce(v, type_name):
    t = (type_name or "").lower()
    try:
        if t in ("number", "float"):
            return float(v)
        if t == "integer":
            return int(v)
        if t == "boolean" and isinstance(v, str):
            return v.strip().lower() == "true"
        if t == "string":
            return str(v)
    except (TypeError, ValueError):
        pass
    return v


def same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


# ---------------------------------------------------------------------------------------------
# Reference timings (for the benchmark)
# ---------------------------------------------------------------------------------------------


def bench_python_loop(objects, rounds):
    """A pure-Python loop: `rounds` passes over `objects` small objects (CPython's own speed)."""

    class Cell:
        __slots__ = ("v",)

        def __init__(self):
            self.v = 0.0

    rng = _random_module.Random(1)
    cells = [Cell() for _ in range(objects)]
    t = time.perf_counter()
    for _ in range(rounds):
        for c in cells:
            c.v = c.v * 0.5 + rng.random()
    return (time.perf_counter() - t) * 1e3


def bench_bare_mesa_sir(agents, steps, seed, infection_rate, recovery_rate):
    """The SIR network model written directly in Mesa 3 (no specification layer): ms per step."""

    class Person(mesa.Agent):
        def __init__(self, model):
            super().__init__(model)
            self.status = "S"

        def infect(self):
            if self.status != "S":
                return
            n = sum(1 for o in self.model.grid.get_neighbors(self.pos) if o.status == "I")
            if n and self.random.random() < 1 - (1 - self.model.rate) ** n:
                self.status = "I"

        def recover(self):
            if self.status == "I" and self.random.random() < recovery_rate:
                self.status = "R"

    class Sir(mesa.Model):
        def __init__(self):
            super().__init__(seed=seed)
            self.rate = infection_rate
            g = nx.barabasi_albert_graph(agents, 3, seed=seed)
            self.grid = NetworkGrid(g)
            for node in g.nodes:
                self.grid.place_agent(Person(self), node)
            for a in self.random.sample(list(self.agents), 10):
                a.status = "I"

        def step(self):
            self.agents.shuffle_do("infect")
            self.agents.shuffle_do("recover")

    m = Sir()
    t = time.perf_counter()
    for _ in range(steps):
        m.step()
    per_step = (time.perf_counter() - t) * 1e3 / steps
    mesa.Agent._ids.pop(m, None)
    return per_step


# ---------------------------------------------------------------------------------------------
# The request loop
# ---------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, cpu_seconds):
        self.models = {}
        self.cpu_seconds = cpu_seconds

    def model(self, req):
        h = req.get("handle")
        m = self.models.get(h)
        if m is None:
            raise UnknownModel(f"unknown model handle {h}")
        return m

    def usable(self, req):
        m = self.model(req)
        if m.poisoned:
            raise Poisoned(m.poisoned)
        return m

    def drop(self, h):
        m = self.models.pop(h, None)
        if m is not None:
            m.forget()

    def handle(self, req):
        op = req.get("op")
        if op == "ping":
            return {"pid": os.getpid(), "mesa": mesa.__version__, "python": sys.version.split()[0]}
        if op == "load":
            h = req["handle"]
            self.drop(h)
            m = SpecModel(req["model"], req.get("seed"))
            self.models[h] = m
            return {"warnings": m.warnings, "initial": m.collect_all(), "info": m.info()}
        if op == "restore":
            h = req["handle"]
            m = pickle.loads(base64.b64decode(req["data"]))
            if not isinstance(m, SpecModel):
                raise ValueError("the snapshot does not hold a model")
            self.drop(h)
            self.models[h] = m
            return {"warnings": m.warnings, "info": m.info()}
        if op == "step":
            m = self.usable(req)
            n = int(req.get("n", 1))
            records = []
            t = time.perf_counter()
            with poison_on_failure(m):
                while len(records) < n and not m.terminated:
                    m.step()
                    records.append({"step": m.steps, "values": m._record})
            elapsed = (time.perf_counter() - t) * 1e3
            return {
                "records": records,
                "steps": m.steps,
                "terminated": m.terminated,
                "elapsedMs": elapsed,
                "warnings": m.warnings,
            }
        if op == "snapshot":
            m = self.usable(req)
            t = time.perf_counter()
            data = pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL)
            elapsed = (time.perf_counter() - t) * 1e3
            return {"data": base64.b64encode(data).decode("ascii"), "elapsedMs": elapsed}
        if op == "set":
            m = self.usable(req)
            return {"affected": m.apply_patch(req.get("patch") or {})}
        if op == "reseed":
            self.usable(req).reseed(int(req["seed"]))
            return {}
        if op == "info":
            return self.model(req).info()
        if op == "collect":
            return {"values": self.usable(req).collect_all()}
        if op == "drop":
            self.drop(req.get("handle"))
            return {}
        if op == "hook":
            return {"effects": run_hook(req)}
        if op == "hook_check":
            return check_hook_source(req["source"])
        if op == "bench":
            kind = req.get("kind")
            if kind == "python_loop":
                return {"ms": bench_python_loop(int(req.get("objects", 1000)), int(req.get("rounds", 100)))}
            if kind == "bare_mesa_sir":
                return {
                    "msPerStep": bench_bare_mesa_sir(
                        int(req.get("agents", 1000)),
                        int(req.get("steps", 50)),
                        int(req.get("seed", 1)),
                        float(req.get("infectionRate", 0.05)),
                        float(req.get("recoveryRate", 0.1)),
                    )
                }
            raise ValueError(f"unknown bench kind {kind!r}")
        raise ValueError(f"unknown op {op!r}")


# ---------------------------------------------------------------------------------------------
# Custom scenes' rule hooks
# ---------------------------------------------------------------------------------------------

HOOK_FILE = "<hooks.py>"
HOOK_ARGS = {"on_action": 3, "on_phase_end": 3, "outcome": 2}
_hook_code = {}


def _compiled_hooks(source):
    """The hook source compiled (kept for the next calls: a scene calls the same source again)."""
    code = _hook_code.get(source)
    if code is None:
        if len(_hook_code) >= 16:
            _hook_code.clear()
        linecache.cache[HOOK_FILE] = (len(source), None, source.splitlines(True), HOOK_FILE)
        code = compile(source, HOOK_FILE, "exec")
        _hook_code[source] = code
    return code


def run_hook(req):
    """Runs one hook in a fresh namespace with `random.Random(seed)` as its rng, so that what it
    returns depends on its arguments only; the answer is checked to be JSON."""
    name = req["hook"]
    if name not in HOOK_ARGS:
        raise ValueError(f"unknown hook {name!r}")
    linecache.cache[HOOK_FILE] = (len(req["source"]), None, req["source"].splitlines(True), HOOK_FILE)
    ns = {"__builtins__": dict(vars(builtins)), "__name__": "simtree_hooks"}
    exec(_compiled_hooks(req["source"]), ns)
    fn = ns.get(name)
    if not isinstance(fn, types.FunctionType):
        return None
    rng = _random_module.Random(int(req["seed"]))
    args = (req["state"], req.get("arg"), rng) if HOOK_ARGS[name] == 3 else (req["state"], rng)
    out = fn(*args)
    try:
        return json.loads(json.dumps(out, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} returned something that is not JSON: {e}") from None


def check_hook_source(source):
    """Parses the hook source (never runs it): its syntax error, or the top-level functions."""
    import ast

    try:
        tree = ast.parse(source, HOOK_FILE)
    except SyntaxError as e:
        return {"syntax": {"line": e.lineno or 0, "message": e.msg}}
    except (ValueError, RecursionError, MemoryError) as e:
        return {"syntax": {"line": 0, "message": f"{type(e).__name__}: {e}"}}
    return {"defines": [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]}


class poison_on_failure:
    """Marks the model unusable if the block fails part-way (its state is then half a step)."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.model.poisoned = f"an earlier call failed: {exc_type.__name__}"
        return False


def model_traceback(exc):
    """The frames of the traceback that are in model code (their file names are sourceNames)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<") and "." in f.filename]
    lines = [f"  {f.filename[1:-1]}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-6:]]
    return "\n".join(lines) or None


class CpuBudget:
    """A soft RLIMIT_CPU at (CPU used so far + budget) for the duration of one call."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        if self.seconds:
            r = resource.getrusage(resource.RUSAGE_SELF)
            soft = int(math.ceil(r.ru_utime + r.ru_stime)) + self.seconds
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        return self

    def __exit__(self, *exc):
        if self.seconds:
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        return False


def answer(worker, req):
    rid = req.get("id")
    seconds = worker.cpu_seconds
    if req.get("op") == "hook" and isinstance(req.get("cpu_seconds"), int) and req["cpu_seconds"] > 0:
        seconds = min(seconds, req["cpu_seconds"]) if seconds else req["cpu_seconds"]
    try:
        with CpuBudget(seconds):
            out = worker.handle(req)
        out["id"] = rid
        out["ok"] = True
        return out
    except CpuLimitExceeded:
        worker_discard(worker, req)
        return fail(rid, "cpu_limit", f"the call used more than {seconds} s of CPU time")
    except MemoryError:
        worker_discard(worker, req)
        return fail(rid, "memory_limit", "the call ran out of memory (worker memory limit)")
    except SpecError as e:
        worker_discard(worker, req)
        return fail(rid, "spec_error", str(e))
    except UnknownModel as e:
        return fail(rid, "unknown_model", str(e))
    except Poisoned as e:
        return fail(rid, "poisoned", str(e))
    except PatchError as e:
        return fail(rid, "bad_request", str(e))
    except Exception as e:  # model code can raise anything
        tb = model_traceback(e)
        if tb is None and req.get("op") not in ("load", "step", "hook"):
            # Not from model code: a malformed request (missing field, bad base64, ...).
            return fail(rid, "bad_request", f"{type(e).__name__}: {e}")
        worker_discard(worker, req)
        return fail(rid, "model_error", f"{type(e).__name__}: {e}", tb)


def worker_discard(worker, req):
    """After a failed load the half-built model is dropped; after a failed step it stays,
    poisoned (see poison_on_failure), so that the caller learns what happened to it."""
    if req.get("op") in ("load", "restore"):
        worker.drop(req.get("handle"))
        # A half-built model is referenced only by Mesa's class-level id counters; release it.
        live = {id(m) for m in worker.models.values()}
        for m in [m for m in mesa.Agent._ids if id(m) not in live]:
            mesa.Agent._ids.pop(m, None)


def _others_alive():
    """Processes of this PID namespace other than PID 1 and us that are not yet dead (zombies
    hold no memory and run nothing)."""
    alive = []
    me = str(os.getpid())
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in ("1", me):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            alive.append(name)
    return alive


def reap_strays():
    """Kill every other process of this PID namespace (PID 1, bubblewrap's init, is spared by the
    kernel) and wait until they are dead (SIGKILL is delivered asynchronously), then collect our
    own dead children. Orphans are collected by PID 1."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            break
        if not _others_alive():
            break
        time.sleep(0.005)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


# Audit events model code may not raise (see the module docs).
FORBIDDEN_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.system",
        "os.spawn",
        "subprocess.Popen",
        "pty.spawn",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    }
)


def _refuse(*_args, **_kwargs):
    raise PermissionError("model code may not start processes")


def _audit(event, _args):
    if event in FORBIDDEN_EVENTS:
        raise PermissionError(f"model code may not start processes or call C functions ({event})")


def forbid_processes():
    """Installs the audit hook, and replaces the one process starter that raises no event
    (subprocess's fork_exec, already imported by the libraries)."""
    import subprocess

    import _posixsubprocess

    _posixsubprocess.fork_exec = _refuse
    subprocess._fork_exec = _refuse
    sys.addaudithook(_audit)


def install_exec_filter(fd):
    """Reads the seccomp program the server passed on `fd` (classic BPF, refusing execve and
    execveat; see server/src/abm/seccomp.rs) and installs it for the whole process, for ever.
    Runs before the first request and while the worker has one thread (a filter installed with
    prctl binds the calling thread and the threads it starts later), and exits if it cannot."""
    import ctypes

    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    program = b"".join(chunks)
    threads = len(os.listdir("/proc/self/task"))
    if not program or len(program) % 8 or threads != 1:
        sys.exit(f"abm_worker: cannot install the exec filter ({len(program)} bytes, {threads} threads)")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(f"abm_worker: cannot install the exec filter: {os.strerror(ctypes.get_errno())}")


def clear_scratch(path, keep):
    """Removes everything in `path` but the entries named in `keep` (what was there when the
    worker started: the folders bubblewrap made for binds under /tmp, such as a checkout's venv),
    best effort: what cannot be removed stays, bounded by the tmpfs's size."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.name in keep:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def fail(rid, kind, message, tb=None):
    err = {"kind": kind, "message": message}
    if tb:
        err["traceback"] = tb
    return {"id": rid, "ok": False, "error": err}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space limit (0: none)")
    parser.add_argument("--cpu-seconds", type=int, default=0, help="CPU budget per call (0: none)")
    parser.add_argument(
        "--reap-strays", action="store_true", help="kill other processes of the PID namespace after each call"
    )
    parser.add_argument("--scratch", help="a private folder to empty after each call (the sandbox's /tmp)")
    parser.add_argument(
        "--exec-filter-fd", type=int, help="a descriptor holding a seccomp program to install at once (no exec)"
    )
    args = parser.parse_args()
    if args.exec_filter_fd is not None:
        install_exec_filter(args.exec_filter_fd)
    if args.reap_strays:
        # Descriptors the server inherited from its own parent without close-on-exec pass through
        # bwrap; in the sandbox they could reach host files or sockets. The worker needs only
        # stdin, stdout and stderr.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    if args.scratch and not args.reap_strays:
        # Only the sandbox's own /tmp is emptied; a host folder never is.
        sys.exit("abm_worker: --scratch needs --reap-strays (a sandbox of its own)")
    keep = frozenset(os.listdir(args.scratch)) if args.scratch else frozenset()
    if args.reap_strays and os.getpid() != 2:
        # PID 2 is the sandboxed command under bubblewrap; on a host it is the kernel's kthreadd,
        # never us. Anywhere else kill(-1) would be a disaster.
        sys.exit(f"abm_worker: --reap-strays needs a private PID namespace (this is PID {os.getpid()})")

    # Protocol on a private copy of stdout; fd 1 (print, C extensions) goes to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    signal.signal(signal.SIGXCPU, _on_sigxcpu)
    if args.memory_mb > 0:
        limit = args.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    worker = Worker(args.cpu_seconds)
    forbid_processes()
    # Imports are done: the server starts timing calls from here.
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    proto.flush()
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request must be a JSON object")
        except ValueError as e:
            out = fail(None, "bad_request", f"not a JSON request: {e}")
        else:
            out = answer(worker, req)
        if args.reap_strays:
            reap_strays()
        if args.scratch:
            clear_scratch(args.scratch, keep)
        try:
            text = json.dumps(out, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            text = json.dumps(fail(out.get("id"), "internal", f"answer not serialisable: {e}"))
        proto.write(text + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
