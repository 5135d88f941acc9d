#!/usr/bin/env node
// Upstream's own React client (SocialSim4 devui/frontend) against a simtree server.
//
// 1. Takes upstream's devui/frontend from the SocialSim4 mirror (git archive of $SOCIALSIM4_REV,
//    default HEAD) or from $SOCIALSIM4_DIR (a checkout, or the frontend folder itself), into
//    target/upstream-client/build/<commit or content hash>/, and builds it with `vite build`
//    against this folder's node_modules (versions pinned in package.json from upstream's
//    bun.lock). The build is cached by that key, so reruns skip it.
// 2. Starts `simtree serve --ephemeral --static-dir <that build>` on a free loopback port.
// 3. Drives each flow in headless Chromium. Upstream's client opens its sockets at the
//    hard-coded `ws://localhost:8090`, so the page is opened at http://localhost:8090 and
//    Chromium maps localhost:8090 to the server's real port (--host-resolver-rules): the page, its
//    fetches and its sockets are same-origin, as behind upstream's own vite proxy.
// 4. Asserts on what the page shows and on the API, collects console errors and uncaught page
//    errors (either fails the flow), saves target/upstream-client/<flow>.png, prints a table and
//    writes target/upstream-client/results.json; exits 1 when a flow fails.
//
// Usage: node run.mjs [--only flow,flow] [--rebuild] [--list]
// Environment: SIMTREE_BIN (default: the newest of target/{release,debug}/simtree),
//   SOCIALSIM4_MIRROR, SOCIALSIM4_REV, SOCIALSIM4_DIR, CHROMIUM (default /usr/bin/chromium).

import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import crypto from 'node:crypto'
import readline from 'node:readline'
import { fileURLToPath } from 'node:url'
import puppeteer from 'puppeteer-core'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(HERE, '../..')
const OUT = process.env.UPSTREAM_CLIENT_OUT || path.join(ROOT, 'target/upstream-client')
const MIRROR = process.env.SOCIALSIM4_MIRROR || '/work/.mirror/f1sherb0y+socialsim4/repo'
const REV = process.env.SOCIALSIM4_REV || 'HEAD'
const CHROMIUM = process.env.CHROMIUM || process.env.PUPPETEER_EXECUTABLE_PATH || '/usr/bin/chromium'
// The origin upstream's client assumes (its sockets hard-code ws://localhost:8090).
const BASE = 'http://localhost:8090'

const argv = process.argv.slice(2)
const flag = (name) => argv.includes(name)
const opt = (name) => {
  const i = argv.indexOf(name)
  return i >= 0 ? argv[i + 1] : undefined
}

const log = (...a) => console.error('[upstream-client]', ...a)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------------------------------------
// Build (cached)

function sha256(data) {
  return crypto.createHash('sha256').update(data).digest('hex')
}

function hashTree(dir) {
  const h = crypto.createHash('sha256')
  const walk = (d) => {
    for (const name of fs.readdirSync(d).sort()) {
      if (name === 'node_modules' || name === 'dist') continue
      const p = path.join(d, name)
      const st = fs.statSync(p)
      if (st.isDirectory()) walk(p)
      else h.update(path.relative(dir, p) + '\0').update(fs.readFileSync(p))
    }
  }
  walk(dir)
  return h.digest('hex')
}

function run(cmd, args, opts = {}) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...opts })
}

async function buildClient() {
  let key
  let source
  if (process.env.SOCIALSIM4_DIR) {
    const d = path.resolve(process.env.SOCIALSIM4_DIR)
    source = fs.existsSync(path.join(d, 'devui/frontend/package.json')) ? path.join(d, 'devui/frontend') : d
    if (!fs.existsSync(path.join(source, 'package.json'))) throw new Error(`${d}: no devui/frontend/package.json`)
    key = 'dir-' + hashTree(source).slice(0, 16)
  } else {
    const commit = run('git', ['-C', MIRROR, 'rev-parse', `${REV}^{commit}`]).trim()
    source = `${MIRROR}@${commit}`
    key = commit.slice(0, 12)
  }
  const lockHash = sha256(fs.readFileSync(path.join(HERE, 'package-lock.json'))).slice(0, 16)
  const dir = path.join(OUT, 'build', key)
  const dist = path.join(dir, 'dist')
  const stampFile = path.join(dir, '.harness-stamp')
  const stamp = `${key} ${lockHash}`
  if (!flag('--rebuild') && fs.existsSync(path.join(dist, 'index.html')) && fs.existsSync(stampFile) && fs.readFileSync(stampFile, 'utf8') === stamp) {
    log(`upstream client ${key}: cached build ${dist}`)
    return { key, source, dist }
  }
  log(`upstream client ${key}: extracting from ${source}`)
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(dir, { recursive: true })
  if (process.env.SOCIALSIM4_DIR) {
    fs.cpSync(source, dir, { recursive: true, filter: (p) => !/[/\\](node_modules|dist)$/.test(p) })
  } else {
    const tmp = path.join(OUT, 'build', `.extract-${process.pid}`)
    fs.rmSync(tmp, { recursive: true, force: true })
    fs.mkdirSync(tmp, { recursive: true })
    const tar = path.join(tmp, 'src.tar')
    execFileSync('git', ['-C', MIRROR, 'archive', '-o', tar, REV, 'devui/frontend'])
    execFileSync('tar', ['-x', '-f', tar, '-C', tmp])
    fs.cpSync(path.join(tmp, 'devui/frontend'), dir, { recursive: true })
    fs.rmSync(tmp, { recursive: true, force: true })
  }
  // Upstream's dependencies must be the ones pinned here (else the build would resolve nothing).
  const theirs = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
  const ours = JSON.parse(fs.readFileSync(path.join(HERE, 'package.json'), 'utf8')).dependencies
  const missing = Object.keys({ ...theirs.dependencies, ...theirs.devDependencies }).filter((n) => !(n in ours))
  if (missing.length) throw new Error(`upstream's package.json needs ${missing.join(', ')}: add them (pinned) to tests/upstream-client/package.json`)
  fs.symlinkSync(path.join(HERE, 'node_modules'), path.join(dir, 'node_modules'), 'dir')
  const logFile = path.join(OUT, `build-${key}.log`)
  log(`upstream client ${key}: vite build (log: ${logFile})`)
  const vite = path.join(HERE, 'node_modules/vite/bin/vite.js')
  await new Promise((resolve, reject) => {
    const out = fs.openSync(logFile, 'w')
    const p = spawn(process.execPath, [vite, 'build'], { cwd: dir, stdio: ['ignore', out, out] })
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`vite build failed (${code}); see ${logFile}`))))
    p.on('error', reject)
  })
  fs.writeFileSync(stampFile, stamp)
  return { key, source, dist }
}

// ---------------------------------------------------------------------------------------------
// Server

function simtreeBin() {
  if (process.env.SIMTREE_BIN) return process.env.SIMTREE_BIN
  const target = process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target')
  const found = ['release', 'debug']
    .map((p) => path.join(target, p, 'simtree'))
    .filter((p) => fs.existsSync(p))
    .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)
  if (!found.length) throw new Error('no simtree binary: set SIMTREE_BIN or build it (cargo build -p simtree-server --bin simtree)')
  return found[0]
}

async function startServer(dist) {
  const bin = simtreeBin()
  const args = ['serve', '--ephemeral', '--addr', '127.0.0.1:0', '--static-dir', dist, '--max-turns', '5000']
  if (fs.existsSync(path.join(ROOT, 'assets/scenarios'))) args.push('--assets', path.join(ROOT, 'assets'))
  log(`server: ${bin} ${args.join(' ')}`)
  const errLog = fs.openSync(path.join(OUT, 'server.log'), 'w')
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', errLog] })
  const first = await new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: proc.stdout })
    const timer = setTimeout(() => reject(new Error('server printed no address within 30 s')), 30000)
    rl.once('line', (l) => {
      clearTimeout(timer)
      resolve(l)
    })
    proc.once('exit', (code) => reject(new Error(`server exited (${code}); see ${path.join(OUT, 'server.log')}`)))
  })
  const m = first.match(/http:\/\/(127\.0\.0\.1:\d+)/)
  if (!m) throw new Error(`unexpected first line from the server: ${first}`)
  proc.stdout.resume()
  return { proc, addr: m[1], bin }
}

// ---------------------------------------------------------------------------------------------
// API (straight to the server, no Origin header)

let API = ''
async function api(method, p, body) {
  const res = await fetch(API + p, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  let json
  try {
    json = JSON.parse(text)
  } catch {
    json = text
  }
  if (!res.ok) throw new Error(`${method} ${p} → ${res.status} ${text.slice(0, 300)}`)
  return json
}
const newTree = async (scenario = 'simple_chat') => (await api('POST', '/devui/simtree', { scenario })).id
const graph = (t) => api('GET', `/devui/simtree/${t}/graph`)
const logs = (t, n) => api('GET', `/devui/simtree/${t}/node/${n}/logs`)
const state = (t, n) => api('GET', `/devui/simtree/${t}/node/${n}/state`)
const children = (g, n) => g.edges.filter((e) => e.from === n).map((e) => e.to)

function check(cond, msg) {
  if (!cond) throw new Error(msg)
}

// What upstream's Studio prints for a log entry (its formatEvent), or null.
function studioLine(it) {
  const d = it.data || {}
  if (it.type === 'system_broadcast') return d.type === 'PublicEvent' ? `[Event] ${d.text || ''}` : null
  if (it.type === 'action_end') {
    const a = d.action || {}
    if (a.action === 'send_message') return `[Action] ${d.agent || ''}: ${(d.result && d.result.message) || a.message || d.summary || ''}`
    if (a.action && a.action !== 'yield') return `[Action ${a.action}] ${d.summary || ''}`
    return null
  }
  if (it.type === 'landlord_deal') return `[Deal] Bottom: ${(d.bottom || []).join(' ')}`
  return null
}
// What upstream's Simulation page prints (its formatEvent: events and messages only).
function simLine(it) {
  const d = it.data || {}
  if (it.type === 'system_broadcast') return d.type === 'PublicEvent' ? `[Event] ${d.text || ''}` : null
  if (it.type === 'action_end' && (d.action || {}).action === 'send_message') return studioLine(it)
  return null
}
const norm = (s) => String(s).replace(/\s+/g, ' ').trim()

// ---------------------------------------------------------------------------------------------
// Page helpers

async function goto(page, p) {
  await page.goto(BASE + p, { waitUntil: 'domcontentloaded' })
}

async function stats(page) {
  return page.evaluate(() => {
    const el = document.querySelector('.stats')
    if (!el) return null
    const t = el.innerText
    const num = (re) => {
      const m = t.match(re)
      return m ? m[1] : null
    }
    return {
      selected: num(/Selected:\s*(\S+)/),
      nodes: Number(num(/Nodes:\s*(\d+)/)),
      edges: Number(num(/Edges:\s*(\d+)/)),
      running: Number(num(/Running:\s*(\d+)/)),
    }
  })
}

async function waitStats(page, pred, what, timeout = 30000) {
  const t0 = Date.now()
  let last = null
  while (Date.now() - t0 < timeout) {
    last = await stats(page)
    if (last && pred(last)) return last
    await sleep(150)
  }
  throw new Error(`timed out waiting for ${what}; the page shows ${JSON.stringify(last)}`)
}

// Polls `fn` until it returns something truthy; `what` (a string, or a function giving one,
// called at the timeout) says what was awaited.
async function waitFor(fn, what, timeout = 30000) {
  const t0 = Date.now()
  let last
  while (Date.now() - t0 < timeout) {
    last = await fn()
    if (last) return last
    await sleep(150)
  }
  throw new Error(`timed out waiting for ${typeof what === 'function' ? await what() : what}`)
}

// The enabled button whose text is exactly `text`.
async function button(page, text, timeout = 10000) {
  const h = await page.waitForFunction(
    (text) => [...document.querySelectorAll('button')].find((b) => b.textContent.trim() === text && !b.disabled) || null,
    { timeout },
    text,
  )
  return h.asElement()
}

// The inputs that sit with `text`'s button (its nearest ancestor holding an input).
async function inputsBeside(page, text) {
  const btn = await button(page, text)
  const handles = await btn.evaluateHandle((b) => {
    let el = b.parentElement
    while (el && !el.querySelector('input')) el = el.parentElement
    return el ? [...el.querySelectorAll('input')] : []
  })
  const props = await handles.getProperties()
  return [...props.values()].map((p) => p.asElement()).filter(Boolean)
}

async function typeInto(page, input, value) {
  await input.click()
  await page.keyboard.down('Control')
  await page.keyboard.press('KeyA')
  await page.keyboard.up('Control')
  await page.keyboard.press('Backspace')
  await input.type(String(value))
  const v = await input.evaluate((e) => e.value)
  check(v === String(value), `input shows ${JSON.stringify(v)} after typing ${JSON.stringify(String(value))}`)
}

async function clickNode(page, id) {
  const fit = await page.$('.react-flow__controls-fitview')
  if (fit) {
    await fit.click()
    await sleep(300)
  }
  const sel = `.react-flow__node[data-id="${id}"]`
  const node = await page.waitForSelector(sel, { timeout: 10000 })
  await node.click()
  await waitStats(page, (s) => s.selected === String(id), `"Selected: ${id}"`, 10000)
}

const flowEdgeIds = (page) =>
  page.evaluate(() => [...document.querySelectorAll('.react-flow__edge')].map((e) => (e.getAttribute('data-testid') || '').replace(/^rf__edge-/, '')))
const flowNodeIds = (page) =>
  page.evaluate(() => [...document.querySelectorAll('.react-flow__node')].map((n) => n.getAttribute('data-id')))

// The CompactSelect whose button shows `label`: open it and pick `option`.
async function pick(page, label, option) {
  const btn = await page.waitForFunction(
    (label) => [...document.querySelectorAll('.select-btn')].find((b) => b.querySelector('span')?.textContent.trim() === label) || null,
    { timeout: 10000 },
    label,
  )
  await btn.asElement().click()
  const item = await page.waitForFunction(
    (option) => [...document.querySelectorAll('.select-menu [role=option]')].find((o) => o.textContent.trim() === option) || null,
    { timeout: 10000 },
    option,
  )
  await item.asElement().click()
}

const eventLines = (page) => page.evaluate(() => [...document.querySelectorAll('.event-line')].map((e) => e.innerText))
const memoryItems = (page) => page.evaluate(() => [...document.querySelectorAll('ul.list-compact li')].map((e) => e.innerText))
// The labels of the CompactSelects, in page order (language, then the page's own).
const selectLabels = (page) =>
  page.evaluate(() => [...document.querySelectorAll('.select-btn')].map((b) => b.querySelector('span')?.textContent.trim() || ''))

async function checkAgentPanel(page, agent, where) {
  const want = agent.short_memory.length
  const items = await waitFor(async () => {
    const it = await memoryItems(page)
    return it.length === want ? it : null
  }, async () => `${where}: ${want} memory items of ${agent.name} (shows ${(await memoryItems(page)).length})`, 10000)
  if (want > 0) {
    const last = agent.short_memory[want - 1]
    check(norm(items[want - 1]).startsWith(norm(`[${last.role}] ${last.content}`).slice(0, 60)), `${where}: last memory item of ${agent.name} differs from the API: ${items[want - 1].slice(0, 120)}`)
  }
  return want
}

// ---------------------------------------------------------------------------------------------
// Flows: each gets a fresh browser context (no localStorage) and its own trees.

const FLOWS = [
  {
    name: 'create',
    what: 'Create on SimTree (each of upstream\'s 5 scenarios) and on Studio (simple_chat_chinese)',
    async run(page, note) {
      await goto(page, '/simtree')
      await button(page, 'Create')
      const scenarios = ['simple_chat', 'council', 'werewolf', 'landlord', 'village']
      for (const scenario of scenarios) {
        const before = new Set((await api('GET', '/devui/simtree')).map((t) => t.id))
        // (The page may remount on navigation, which resets its picker: read what it shows.)
        const current = (await selectLabels(page)).find((l) => scenarios.includes(l))
        if (current !== scenario) await pick(page, current, scenario)
        await (await button(page, 'Create')).click()
        const { id } = await waitFor(async () => {
          const m = page.url().match(/\/simtree\/(\d+)$/)
          return m && !before.has(Number(m[1])) ? { id: Number(m[1]) } : null
        }, 'the URL to name a new tree')
        const listed = (await api('GET', '/devui/simtree')).find((t) => t.id === id)
        check(listed, `tree ${id} is not in GET /devui/simtree`)
        check(listed.scenario === scenario, `tree ${id} has scenario ${listed.scenario}, not ${scenario}`)
        const g = await graph(id)
        check(g.nodes.length === 1 && g.root === listed.root, `new tree ${id}'s graph is not its root alone: ${JSON.stringify(g)}`)
        await waitStats(page, (s) => s.nodes === 1 && s.selected === String(g.root), `tree ${id}: "Selected: ${g.root}", "Nodes: 1"`)
        const ids = await waitFor(async () => {
          const ids = await flowNodeIds(page)
          return ids.length === 1 ? ids : null
        }, `tree ${id}: one graph node drawn`)
        check(ids[0] === String(g.root), `tree ${id}: the graph draws node ${ids[0]}, not the root ${g.root}`)
        note(`${scenario} → tree ${id}`)
      }
      // Studio's own Create, with the scenario only Studio offers.
      const before = new Set((await api('GET', '/devui/simtree')).map((t) => t.id))
      await goto(page, '/studio')
      await button(page, 'Create')
      await pick(page, 'simple_chat', 'simple_chat_chinese')
      await (await button(page, 'Create')).click()
      const { id } = await waitFor(async () => {
        const m = page.url().match(/\/studio\/(\d+)$/)
        return m && !before.has(Number(m[1])) ? { id: Number(m[1]) } : null
      }, 'Studio: the URL to name a new tree')
      const listed = (await api('GET', '/devui/simtree')).find((t) => t.id === id)
      check(listed && /simple_chat_zh|simple_chat_chinese/.test(listed.scenario), `Studio's tree ${id}: scenario ${listed && listed.scenario}`)
      await waitStats(page, (s) => s.nodes === 1, `Studio tree ${id}: "Nodes: 1"`)
      const root = (await graph(id)).root
      const want = (await logs(id, root)).map(studioLine).filter(Boolean).length
      await waitFor(async () => (await eventLines(page)).length === want, `Studio tree ${id}: ${want} event lines of the root`)
      const agents = (await state(id, root)).agents
      check(agents.length > 0, `Studio tree ${id}: the root has no agents`)
      await waitFor(async () => (await selectLabels(page)).includes(agents[0].name), `Studio tree ${id}: agent ${agents[0].name} in the picker`)
      note(`Studio simple_chat_chinese → tree ${id} (${want} events, agents ${agents.map((a) => a.name).join(', ')})`)
    },
  },
  {
    name: 'parallel_run',
    what: 'Parallel Run (Step Count 1, Parallel Size 3) from the root',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 1 && s.selected === String(root), 'the root selected')
      const [turns, count] = await inputsBeside(page, 'Parallel Run')
      await typeInto(page, turns, 1)
      await typeInto(page, count, 3)
      await (await button(page, 'Parallel Run')).click()
      // The client does not refetch after Parallel Run: the nodes come from the tree socket.
      const s = await waitStats(page, (s) => s.nodes === 4 && s.edges === 3 && s.running === 0, '"Nodes: 4 · Edges: 3 · Running: 0" (from the tree socket)')
      const g = await graph(t)
      const kids = children(g, root)
      check(kids.length === 3, `the root has ${kids.length} children in the API graph, not 3`)
      check(g.nodes.length === 4, `the API graph has ${g.nodes.length} nodes`)
      for (const k of kids) {
        const e = g.edges.find((e) => e.to === k)
        check(e.type === 'advance', `edge ${root}→${k} has type ${e.type}`)
        const n = g.nodes.find((n) => n.id === k)
        check(!n.status || n.status === 'done', `child ${k} has status ${n.status}`)
        check((await state(t, k)).turns === 1, `child ${k} is not one turn on`)
      }
      const drawn = await flowNodeIds(page)
      check(kids.every((k) => drawn.includes(String(k))), `the graph draws ${drawn}, not every child ${kids}`)
      note(`tree ${t}: children ${kids.join(', ')}; page ${JSON.stringify(s)}`)
    },
  },
  {
    name: 'apply',
    what: 'Apply (public broadcast branch) on a selected non-root node',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      const c = (await api('POST', `/devui/simtree/${t}/advance`, { parent: root, turns: 1 })).child
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 2, '"Nodes: 2"')
      await clickNode(page, c)
      const text = `Harness broadcast ${Date.now()}`
      const [input] = await inputsBeside(page, 'Apply')
      await typeInto(page, input, text)
      await (await button(page, 'Apply')).click()
      // (Edges are not counted here: upstream's client appends the socket's `attached` edge
      // without a duplicate check, so when that message comes after its own refetch the page
      // counts one edge twice. The drawn edges are checked below.)
      const shown = await waitStats(page, (s) => s.nodes === 3, '"Nodes: 3"')
      const g = await graph(t)
      const kids = children(g, c)
      check(kids.length === 1, `node ${c} has ${kids.length} children in the API graph, not 1`)
      const b = kids[0]
      const edge = g.edges.find((e) => e.to === b)
      check(edge.type === 'public_event', `edge ${c}→${b} has type ${edge.type}, not public_event`)
      const lb = await logs(t, b)
      const lc = await logs(t, c)
      check(JSON.stringify(lb.slice(0, lc.length)) === JSON.stringify(lc), `node ${b}'s log does not start with its parent's`)
      const last = lb[lb.length - 1]
      check(last.type === 'system_broadcast' && last.data.type === 'PublicEvent' && String(last.data.text).includes(text), `node ${b}'s log ends with ${JSON.stringify(last).slice(0, 200)}, not the broadcast`)
      check((await flowNodeIds(page)).includes(String(b)), `the graph does not draw node ${b}`)
      const drawn = await flowEdgeIds(page)
      check(JSON.stringify([...new Set(drawn)].sort()) === JSON.stringify([`e${root}-${c}`, `e${c}-${b}`].sort()), `the page draws edges ${drawn}`)
      note(`tree ${t}: ${c} → ${b} (public_event), log ends "${last.data.text}"`)
      if (shown.edges !== 2) note(`(upstream client: "Edges: ${shown.edges}" for 2 edges; drawn ${drawn.join(', ')})`)
    },
  },
  {
    name: 'studio',
    what: 'Studio: select a node → its events and each agent\'s memory',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      const c = (await api('POST', `/devui/simtree/${t}/advance`, { parent: root, turns: 2 })).child
      const text = `Studio broadcast ${Date.now()}`
      const b = (await api('POST', `/devui/simtree/${t}/branch`, { parent: c, ops: [{ op: 'public_broadcast', text }] })).child
      await goto(page, `/studio/${t}`)
      await waitStats(page, (s) => s.nodes === 3, '"Nodes: 3"')
      for (const n of [c, b]) {
        await clickNode(page, n)
        const want = (await logs(t, n)).map(studioLine).filter(Boolean)
        const lines = await waitFor(async () => {
          const l = await eventLines(page)
          return l.length === want.length ? l : null
        }, async () => `node ${n}: ${want.length} event lines (page shows ${(await eventLines(page)).length})`)
        for (let i = 0; i < want.length; i++) check(norm(lines[i]) === norm(want[i]), `node ${n}, event line ${i}: page "${lines[i]}" vs API "${want[i]}"`)
        const agents = (await state(t, n)).agents
        check(agents.length >= 2, `node ${n} has ${agents.length} agents`)
        await waitFor(async () => (await selectLabels(page)).includes(agents[0].name), `node ${n}: agent ${agents[0].name} in the picker`)
        const m0 = await checkAgentPanel(page, agents[0], `node ${n}`)
        await pick(page, agents[0].name, agents[1].name)
        const m1 = await checkAgentPanel(page, agents[1], `node ${n}`)
        await pick(page, agents[1].name, agents[0].name)
        note(`node ${n}: ${want.length} events; ${agents[0].name} ${m0} and ${agents[1].name} ${m1} memory items`)
      }
      check(norm((await eventLines(page)).at(-1)).includes(text), `node ${b}: the last event line is not the broadcast`)
    },
  },
  {
    name: 'studio_tree_switch',
    what: 'Studio: switch trees with a node selected that the other tree lacks',
    // While the other tree's graph loads, the client still asks for the old selection there; the
    // server may refuse that (404) as long as the body is one the client can use (checked below).
    expectHttp: [/\/devui\/simtree\/\d+\/sim\/\d+\/(events|state) → 404$/],
    async run(page, note) {
      const a = await newTree()
      const rootA = (await graph(a)).root
      let n = rootA
      for (let i = 0; i < 3; i++) n = (await api('POST', `/devui/simtree/${a}/advance`, { parent: n, turns: 1 })).child
      const bTree = await newTree('council')
      const gb = await graph(bTree)
      check(!gb.nodes.some((x) => x.id === n), `tree ${bTree} has a node ${n} too; the flow needs one it lacks`)
      await goto(page, `/studio/${a}`)
      await waitStats(page, (s) => s.nodes === 4, '"Nodes: 4"')
      await clickNode(page, n)
      const wantA = (await logs(a, n)).map(studioLine).filter(Boolean).length
      await waitFor(async () => (await eventLines(page)).length === wantA, `tree ${a} node ${n}: ${wantA} event lines`)
      // What the client asks of tree B for the node it lacks, and what it gets.
      const stray = []
      const order = [] // the replies of …/sim/N/{events,state} in tree B, as they finished
      page.on('requestfinished', (req) => {
        const m = req.url().match(new RegExp(`/devui/simtree/${bTree}/sim/(\\d+)/(events|state)$`))
        if (m) order.push(`${m[1]}/${m[2]}`)
      })
      page.on('response', async (r) => {
        if (new RegExp(`/devui/simtree/${bTree}/sim/${n}/(events|state)$`).test(r.url())) {
          let body = ''
          try {
            body = await r.text()
          } catch {}
          let usable = false
          try {
            const v = JSON.parse(body)
            usable = r.url().endsWith('/events') ? Array.isArray(v) : Array.isArray(v.agents)
          } catch {}
          stray.push({ usable, text: `${r.url().replace(/^.*\/devui/, '/devui')} → ${r.status()} ${body.slice(0, 80)}` })
        }
      })
      await pick(page, String(a), String(bTree))
      await waitFor(async () => page.url().endsWith(`/studio/${bTree}`), `the URL /studio/${bTree}`)
      await waitStats(page, (s) => s.nodes === gb.nodes.length && s.selected === String(gb.root), `tree ${bTree}: "Selected: ${gb.root}", "Nodes: ${gb.nodes.length}"`)
      const wantB = (await logs(bTree, gb.root)).map(studioLine).filter(Boolean)
      const agentsB = (await state(bTree, gb.root)).agents
      const shown = await waitFor(
        async () => (await eventLines(page)).length === wantB.length && (await selectLabels(page)).includes(agentsB[0].name),
        async () => `tree ${bTree}'s root: ${wantB.length} event lines and agent ${agentsB[0].name} (page shows ${(await eventLines(page)).length} lines, pickers ${(await selectLabels(page)).join(' | ')}; replies in order ${order.join(', ')})`,
        8000,
      ).catch((e) => e)
      let raced = ''
      if (shown !== true) {
        // Upstream's Studio does not drop stale replies: its refreshSelected for the old node and
        // the one for the new root run at once, and whichever state reply comes last sets the
        // panels. When that is the old node's (empty) one, the panels stay empty. That is its own
        // race, excused only when the order of the replies proves it.
        const states = order.filter((x) => x.endsWith('/state'))
        const proven = states.includes(`${gb.root}/state`) && states.at(-1) === `${n}/state` && (await eventLines(page)).length === 0
        if (!proven) throw shown
        raced = ` (upstream client race: the stale reply for node ${n} came last, replies ${order.join(', ')}, and emptied the panels)`
      }
      await sleep(500)
      const alive = await page.evaluate(() => !!document.querySelector('.stats') && !!document.querySelector('.react-flow') && document.querySelector('h3.title')?.textContent)
      check(alive === 'Studio', `the page no longer renders Studio (title: ${alive})`)
      for (const r of stray) check(r.usable, `the client cannot use the reply ${r.text}`)
      note(`tree ${a} node ${n} → tree ${bTree}: ${stray.map((r) => r.text).join('; ') || 'no request for the stray node'}; then root ${gb.root}: ${wantB.length} events, agents ${agentsB.map((x) => x.name).join(', ')}${raced}`)
    },
  },
  {
    name: 'view_details_running',
    what: '"View details" on a running node (Parallel Run of 3000 turns)',
    async run(page, note, after) {
      const t = await newTree()
      const root = (await graph(t)).root
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 1 && s.selected === String(root), 'the root selected')
      const [turns, count] = await inputsBeside(page, 'Parallel Run')
      await typeInto(page, turns, 3000)
      await typeInto(page, count, 1)
      await (await button(page, 'Parallel Run')).click()
      await waitStats(page, (s) => s.nodes === 2 && s.running === 1, '"Nodes: 2 · Running: 1" (from the tree socket)')
      const g = await graph(t)
      const n = children(g, root)[0]
      check(g.running.includes(n), `the API does not list node ${n} as running: ${JSON.stringify(g.running)}`)
      await clickNode(page, n)
      const stateReply = page.waitForResponse((r) => r.url().endsWith(`/devui/simtree/${t}/sim/${n}/state`), { timeout: 15000 })
      const eventsReply = page.waitForResponse((r) => r.url().endsWith(`/devui/simtree/${t}/sim/${n}/events`), { timeout: 15000 })
      await (await button(page, 'View details')).click()
      await waitFor(async () => page.url().endsWith(`/sim/${t}?node=${n}`), async () => `the URL /sim/${t}?node=${n} (it is ${page.url()})`)
      const [sr, er] = await Promise.all([stateReply, eventsReply])
      const st = await sr.json().catch(() => null)
      const ev = await er.json().catch(() => null)
      const runningAfter = (await graph(t)).running.includes(n)
      check(sr.status() === 200, `GET …/sim/${n}/state of the running node → ${sr.status()} ${JSON.stringify(st).slice(0, 200)}`)
      check(er.status() === 200 && Array.isArray(ev), `GET …/sim/${n}/events of the running node → ${er.status()}`)
      check(st && Array.isArray(st.agents) && st.agents.length > 0, `the running node's state has no agents: ${JSON.stringify(st).slice(0, 200)}`)
      check(runningAfter, `node ${n} finished before the page had read it: inconclusive (raise the turns)`)
      // The page shows the agents of that reply, and its events.
      await waitFor(async () => (await selectLabels(page)).includes(st.agents[0].name), async () => `agent ${st.agents[0].name} in the page's picker (labels: ${(await selectLabels(page)).join(' | ')})`, 10000)
      const items = await waitFor(async () => {
        const it = await memoryItems(page)
        return it.length === st.agents[0].short_memory.length ? it : null
      }, async () => `${st.agents[0].short_memory.length} memory items of ${st.agents[0].name} (page shows ${(await memoryItems(page)).length})`, 10000)
      const wantLines = ev.map(simLine).filter(Boolean).length
      await waitFor(async () => (await eventLines(page)).length === wantLines, async () => `${wantLines} event lines (page shows ${(await eventLines(page)).length})`, 10000)
      check(items.length > 0, `no memory shown for ${st.agents[0].name}`)
      note(`tree ${t} node ${n} running (turns so far ${st.turns}): agents ${st.agents.map((a) => a.name).join(', ')}; ${items.length} memory items, ${wantLines} event lines`)
      // Stop the run once the page is gone (its pending Parallel Run request then gets 409).
      after(() => api('DELETE', `/devui/simtree/${t}/node/${n}`))
    },
  },
  {
    name: 'run_leaves',
    what: 'Run leaves (1 turn) with leaves at depths 1 and 2',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      const [c1, c2] = (await api('POST', `/devui/simtree/${t}/advance_multi`, { parent: root, turns: 1, count: 2 })).children
      const d = (await api('POST', `/devui/simtree/${t}/advance`, { parent: c1, turns: 1 })).child
      const g0 = await graph(t)
      const leaves = g0.nodes.map((x) => x.id).filter((id) => children(g0, id).length === 0).sort((x, y) => x - y)
      check(JSON.stringify(leaves) === JSON.stringify([c2, d].sort((x, y) => x - y)), `leaves ${leaves}`)
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 4, '"Nodes: 4"')
      const [input] = await inputsBeside(page, 'Run')
      await typeInto(page, input, 1)
      await (await button(page, 'Run')).click()
      await waitStats(page, (s) => s.nodes === 6 && s.running === 0, '"Nodes: 6 · Running: 0"')
      const g = await graph(t)
      check(g.nodes.length === 6, `the API graph has ${g.nodes.length} nodes, not 6`)
      const made = []
      for (const l of leaves) {
        const k = children(g, l)
        check(k.length === 1, `leaf ${l} has ${k.length} children, not 1`)
        check(g.edges.find((e) => e.to === k[0]).type === 'advance', `edge ${l}→${k[0]} is not advance`)
        const depth = g.nodes.find((x) => x.id === k[0]).depth
        check(depth === g0.nodes.find((x) => x.id === l).depth + 1, `child ${k[0]} of ${l} has depth ${depth}`)
        made.push(`${l}→${k[0]}`)
      }
      const drawn = await flowNodeIds(page)
      check(g.nodes.every((x) => drawn.includes(String(x.id))), `the page draws ${drawn}`)
      note(`tree ${t}: ${made.join(', ')}`)
    },
  },
  {
    name: 'run_leaves_while_running',
    what: 'Run leaves while one leaf is running (extra): all or nothing',
    // A fan-out with a running parent is refused whole (docs/http-api.md, "Fan-outs").
    expectHttp: [/POST \/devui\/simtree\/\d+\/advance_frontier → 409$/],
    async run(page, note, after) {
      const t = await newTree()
      const root = (await graph(t)).root
      const idle = (await api('POST', `/devui/simtree/${t}/advance`, { parent: root, turns: 1 })).child
      // A long run under the root, not awaited: its node is a running leaf.
      const long = api('POST', `/devui/simtree/${t}/advance_multi`, { parent: root, turns: 3000, count: 1 }).catch(() => {})
      const { n } = await waitFor(async () => {
        const g = await graph(t)
        return g.running.length === 1 ? { n: g.running[0] } : null
      }, 'the long run to start')
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 3, '"Nodes: 3"')
      const before = (await graph(t)).nodes.length
      const reply = page.waitForResponse((r) => r.url().endsWith(`/devui/simtree/${t}/advance_frontier`), { timeout: 15000 })
      const [input] = await inputsBeside(page, 'Run')
      await typeInto(page, input, 1)
      await (await button(page, 'Run')).click()
      const r = await reply
      const body = await r.text()
      await sleep(1000)
      const g = await graph(t)
      check(g.running.includes(n), `node ${n} stopped running before the check: inconclusive`)
      if (r.status() === 409) check(g.nodes.length === before, `the refused Run leaves still made ${g.nodes.length - before} node(s): ${JSON.stringify(g.edges.slice(before - 1))}`)
      else check(r.ok() && children(g, idle).length === 1, `Run leaves → ${r.status()} ${body.slice(0, 200)}`)
      const s = await stats(page)
      check(s && s.nodes === g.nodes.length, `the page shows ${JSON.stringify(s)}, the API ${g.nodes.length} nodes`)
      note(`tree ${t}: leaf ${n} running, leaf ${idle} idle: Run leaves → ${r.status()} ${body.slice(0, 120)}; nodes ${before} → ${g.nodes.length}`)
      after(async () => {
        await api('DELETE', `/devui/simtree/${t}/node/${n}`)
        await long
      })
    },
  },
  {
    name: 'chain_run',
    what: 'Chain Run (Chain Length 3) from the root (extra)',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 1 && s.selected === String(root), 'the root selected')
      const [input] = await inputsBeside(page, 'Chain Run')
      await typeInto(page, input, 3)
      await (await button(page, 'Chain Run')).click()
      await waitStats(page, (s) => s.nodes === 4 && s.running === 0, '"Nodes: 4 · Running: 0" (from the tree socket)')
      const g = await graph(t)
      let n = root
      const chain = []
      for (let i = 0; i < 3; i++) {
        const k = children(g, n)
        check(k.length === 1, `node ${n} has ${k.length} children in the chain`)
        n = k[0]
        chain.push(n)
      }
      // (A node's `turns` is the turns of its own run, not cumulative: spec §1.11.)
      for (const [i, k] of chain.entries()) {
        check(g.nodes.find((x) => x.id === k).depth === i + 1, `chain node ${k} has depth ${g.nodes.find((x) => x.id === k).depth}`)
        check((await state(t, k)).turns === 1, `chain node ${k} ran ${(await state(t, k)).turns} turns, not 1`)
      }
      note(`tree ${t}: ${root} → ${chain.join(' → ')}`)
    },
  },
  {
    name: 'delete_subtree',
    what: 'Delete a subtree (extra)',
    async run(page, note) {
      const t = await newTree()
      const root = (await graph(t)).root
      const c = (await api('POST', `/devui/simtree/${t}/advance`, { parent: root, turns: 1 })).child
      const d = (await api('POST', `/devui/simtree/${t}/advance`, { parent: c, turns: 1 })).child
      const e = (await api('POST', `/devui/simtree/${t}/advance`, { parent: root, turns: 1 })).child
      await goto(page, `/simtree/${t}`)
      await waitStats(page, (s) => s.nodes === 4, '"Nodes: 4"')
      await clickNode(page, c)
      await (await button(page, 'Delete')).click()
      await waitStats(page, (s) => s.nodes === 2, '"Nodes: 2"')
      const g = await graph(t)
      check(JSON.stringify(g.nodes.map((x) => x.id).sort()) === JSON.stringify([root, e].sort()), `the API graph keeps ${g.nodes.map((x) => x.id)}`)
      const drawn = await flowNodeIds(page)
      check(!drawn.includes(String(c)) && !drawn.includes(String(d)), `the page still draws ${drawn}`)
      note(`tree ${t}: deleted ${c} and ${d}; left ${g.nodes.map((x) => x.id).join(', ')}`)
    },
  },
]

// ---------------------------------------------------------------------------------------------

async function runFlow(browser, flow) {
  const context = await browser.createBrowserContext()
  const page = await context.newPage()
  await page.setViewport({ width: 1400, height: 900 })
  const errors = []
  const warnings = []
  const http = [] // unexpected error replies (they fail the flow)
  const expected = [] // error replies the flow allows (expectHttp)
  const cleanups = []
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`))
  page.on('console', (m) => {
    const loc = m.location()?.url ? ` (${m.location().url.replace(/^.*\/\/[^/]+/, '')})` : ''
    // The browser's own log of a failed load duplicates the response seen below.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(`console.error: ${m.text()}${loc}`)
    else if (m.type() === 'warn' || m.type() === 'warning') warnings.push(`console.warn: ${m.text()}`)
  })
  page.on('response', (r) => {
    if (r.status() < 400) return
    const line = `${r.request().method()} ${r.url().replace(/^.*\/\/[^/]+/, '')} → ${r.status()}`
    if ((flow.expectHttp || []).some((re) => re.test(line))) expected.push(line)
    else http.push(line)
  })
  page.on('requestfailed', (r) => {
    const f = r.failure()?.errorText || ''
    if (f !== 'net::ERR_ABORTED') http.push(`${r.method()} ${r.url().replace(/^.*\/\/[^/]+/, '')} failed: ${f}`)
  })
  const notes = []
  let failure = null
  const t0 = Date.now()
  try {
    await Promise.race([
      flow.run(page, (s) => notes.push(s), (f) => cleanups.push(f)),
      sleep(120000).then(() => {
        throw new Error('flow timed out (120 s)')
      }),
    ])
    await sleep(300) // late errors of the last action
  } catch (e) {
    failure = e.message.split('\n')[0]
  }
  const shot = path.join(OUT, `${flow.name}.png`)
  await page.screenshot({ path: shot }).catch(() => {})
  await context.close().catch(() => {})
  for (const f of cleanups) await f().catch((e) => log(`cleanup of ${flow.name}: ${e.message}`))
  const ok = !failure && errors.length === 0 && http.length === 0
  return { name: flow.name, what: flow.what, ok, failure, errors, http, expected, warnings: [...new Set(warnings)], notes, secs: (Date.now() - t0) / 1000, screenshot: shot }
}

// The harness's own check: an uncaught exception and an unhandled rejection on a page of the
// server's origin both reach the error list, so "no uncaught error" means something.
async function probe(browser) {
  const context = await browser.createBrowserContext()
  const page = await context.newPage()
  const seen = []
  page.on('pageerror', (e) => seen.push(e.message))
  await goto(page, '/')
  await page.evaluate(() => {
    setTimeout(() => {
      throw new Error('probe-throw')
    }, 0)
    Promise.reject(new Error('probe-reject'))
  })
  await sleep(500)
  await context.close()
  if (!seen.some((m) => m.includes('probe-throw')) || !seen.some((m) => m.includes('probe-reject')))
    throw new Error(`harness self-check: page errors not captured (saw ${JSON.stringify(seen)})`)
}

async function main() {
  const [major, minor] = process.versions.node.split('.').map(Number)
  if (major < 20 || (major === 20 && minor < 19)) throw new Error(`node ${process.versions.node}: vite 7 needs ≥ 20.19`)
  if (flag('--list')) {
    for (const f of FLOWS) console.log(`${f.name}\t${f.what}`)
    return 0
  }
  fs.mkdirSync(OUT, { recursive: true })
  const only = opt('--only')?.split(',')
  const flows = only ? FLOWS.filter((f) => only.includes(f.name)) : FLOWS
  if (only && flows.length !== only.length) throw new Error(`unknown flow in --only ${only}; see --list`)
  const build = await buildClient()
  const server = await startServer(build.dist)
  API = `http://${server.addr}`
  let browser
  const results = []
  try {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--lang=en-US', `--host-resolver-rules=MAP localhost:8090 ${server.addr}`],
    })
    await probe(browser)
    for (const flow of flows) {
      log(`flow ${flow.name} …`)
      const r = await runFlow(browser, flow)
      results.push(r)
      log(`flow ${flow.name}: ${r.ok ? 'pass' : 'FAIL'} (${r.secs.toFixed(1)} s)`)
    }
  } finally {
    if (browser) await browser.close().catch(() => {})
    server.proc.kill('SIGTERM')
  }
  const summary = {
    upstream: build.source,
    build: build.key,
    server: server.bin,
    date: new Date().toISOString(),
    results,
  }
  fs.writeFileSync(path.join(OUT, 'results.json'), JSON.stringify(summary, null, 2))
  // The table, then the details of each flow.
  const w = Math.max(...results.map((r) => r.name.length))
  console.log(`upstream client ${build.key} (${build.source}) against ${server.bin}\n`)
  console.log(`| ${'flow'.padEnd(w)} | result |`)
  console.log(`|${'-'.repeat(w + 2)}|--------|`)
  for (const r of results) console.log(`| ${r.name.padEnd(w)} | ${r.ok ? 'pass  ' : 'FAIL  '} |`)
  console.log('')
  for (const r of results) {
    console.log(`${r.ok ? 'pass' : 'FAIL'} ${r.name}: ${r.what}`)
    for (const n of r.notes) console.log(`    ${n}`)
    if (r.failure) console.log(`    failure: ${r.failure}`)
    for (const e of r.errors) console.log(`    ${e}`)
    for (const h of r.http) console.log(`    http: ${h}`)
    for (const h of r.expected) console.log(`    http (allowed): ${h}`)
    for (const wn of r.warnings) console.log(`    (${wn.slice(0, 200)})`)
  }
  console.log(`\nscreenshots and results.json in ${OUT}`)
  return results.every((r) => r.ok) ? 0 : 1
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`[upstream-client] ${e.stack || e.message}`)
    process.exit(2)
  },
)
