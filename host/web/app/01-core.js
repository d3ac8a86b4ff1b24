/*
 * tunehost web UI (plain ES2017; the build only joins the parts).
 *
 * Two modes:
 *   - report mode: window.TUNEHOST_REPORT = {session, status, trials, metrics}
 *     is rendered once, without fetching and without control actions;
 *   - live mode: the JSON API (api/session, api/status, api/trials,
 *     api/metrics) is polled from the same origin.
 *
 * Everything coming from the API is treated as untrusted text: it goes into
 * the page through textContent, or through escapeHtml() when HTML strings are
 * built. Nothing is written to the console.
 *
 * Globals for tests: window.tunehostCharts (Chart instances by canvas id),
 * window.tunehostRenders (complete render counter), document.body.dataset.loaded.
 *
 * app.js is built from host/web/app/*.js, joined in order by the build
 * (host/CMakeLists.txt): one function body across the parts.
 */
(function () {
  'use strict';

  var FINISHED = new Set(['DONE', 'STOPPED', 'ERROR', 'VIEWED']);
  var TRIAL_STATUSES = ['WAITING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'USER_CANCELED',
    'SYS_CANCELED', 'EARLY_STOPPED'];
  var ENDED = new Set(['SUCCEEDED', 'FAILED', 'USER_CANCELED', 'SYS_CANCELED', 'EARLY_STOPPED']);
  var ROW_CAP = 2000;
  var POLL_MS = 1000;
  var SLOW_POLL_MS = 5000;
  var AUTH_TEXT = 'not authorized: open the URL tunehost printed (it carries ?token=...)';

  window.tunehostCharts = window.tunehostCharts || {};
  if (typeof window.tunehostRenders !== 'number') window.tunehostRenders = 0;

  var state = {
    report: false,
    session: null,
    status: null,
    trials: null,          // array of TrialInfo, or null before the first load
    metrics: [],           // array of metric records
    trialsText: null,      // raw reply text, used as a cheap change signature
    metricsText: null,
    trialsVersion: 0,
    metricsVersion: 0,
    derived: null,
    derivedKey: '',
    sort: { key: 'seq', dir: 1 },
    filter: 'all',
    selectedId: null,
    prefilled: false,
    limitsBaseline: { concurrency: '', max_trials: '', max_duration_s: '' },
    finalRefreshDone: false,
    ticking: false,
    pendingTick: false,
    timer: null,
    everRendered: false
  };

  var chartSigs = {};
  var tableSig = '';
  var theadSig = '';
  var detailSig = '';
  var parallelSig = '';
  var noticeKind = '';

  // ---------------------------------------------------------------- helpers

  function $(id) { return document.getElementById(id); }

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' :
        c === '"' ? '&quot;' : '&#39;';
    });
  }

  function isNum(v) { return typeof v === 'number' && isFinite(v); }

  // Scalar of a metric: number -> itself; object -> its "default"; else null.
  function scalar(m) {
    if (isNum(m)) return m;
    if (m && typeof m === 'object' && !Array.isArray(m) && isNum(m['default'])) return m['default'];
    return null;
  }

  function fmtNum(v) {
    if (!isNum(v)) return '—';
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-4 || a >= 1e9)) return v.toExponential(4);
    return String(Number(v.toPrecision(6)));
  }

  function fmtDuration(s) {
    if (!isNum(s)) return '—';
    if (s < 0) s = 0;
    var t = Math.round(s);
    var h = Math.floor(t / 3600);
    var m = Math.floor((t % 3600) / 60);
    var sec = t % 60;
    return h + ':' + (m < 10 ? '0' : '') + m + ':' + (sec < 10 ? '0' : '') + sec;
  }

  function fmtSeconds(s) {
    if (!isNum(s)) return '—';
    return s >= 100 ? s.toFixed(0) : s >= 10 ? s.toFixed(1) : s.toFixed(2);
  }

  function fmtTime(t) {
    if (!isNum(t) || t <= 0) return '—';
    try { return new Date(t * 1000).toLocaleString(); } catch (e) { return String(t); }
  }

  function setText(id, text) {
    var el = $(id);
    if (el) el.textContent = text == null ? '' : String(text);
  }

  function str(v) { return v == null ? '' : String(v); }

  function hasOwn(o, k) { return Object.prototype.hasOwnProperty.call(o, k); }

  function paramsOf(t) {
    var p = t && t.parameters;
    return p && typeof p === 'object' && !Array.isArray(p) ? p : {};
  }

  function paramValue(t, name) {
    var p = paramsOf(t);
    if (!hasOwn(p, name)) return undefined;
    var v = p[name];
    return v === null ? undefined : v;
  }

  // Text form of a parameter value (nested choice objects as JSON text).
  function valueText(v) {
    if (v === undefined || v === null) return null;
    if (typeof v === 'string') return v;
    if (typeof v === 'object') {
      try { return JSON.stringify(v); } catch (e) { return String(v); }
    }
    return String(v);
  }

  function truncate(s, n) {
    s = String(s);
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  function safeClass(s) { return String(s).replace(/[^A-Za-z0-9_-]/g, ''); }

  // The objectives the tuner names (ST objectives: key -> "maximize" or
  // "minimize"), in order, or null for one scalar metric.
  function namedObjectives(st) {
    var o = st && st.objectives;
    if (!o || typeof o !== 'object' || Array.isArray(o)) return null;
    var keys = Object.keys(o);
    if (!keys.length) return null;
    return keys.map(function (k) { return { key: k, maximize: o[k] === 'maximize' }; });
  }

  // A final result's value for an objective or constraint key: "default" is
  // the scalar; other keys are numbers in a result map; null otherwise.
  function objectiveValue(result, key) {
    if (key === 'default') return scalar(result);
    if (!result || typeof result !== 'object' || Array.isArray(result)) return null;
    var v = Object.prototype.hasOwnProperty.call(result, key) ? result[key] : null;
    return isNum(v) ? v : null;
  }

  function optimizeMode() {
    var st = state.status;
    return st && st.optimize_mode === 'minimize' ? 'minimize' : 'maximize';
  }

  function isReadOnlyMode() {
    var s = state.session;
    return state.report || !s || s.role !== 'admin' || !s.live || !!s.read_only;
  }

  // Kill buttons: admin, live, not read-only, not a report.
  function actionsAllowed() { return !isReadOnlyMode(); }

  // The limits form additionally hides once the experiment is over.
  function controlsAllowed() {
    var st = state.status;
    return actionsAllowed() && !!st && !FINISHED.has(st.status);
  }

  // Colour for "goodness" g in [0, 1]: 1 = good (dark blue), 0 = bad (light orange).
  function goodColor(g, alpha) {
    if (!isNum(g)) g = 0.5;
    g = Math.max(0, Math.min(1, g));
    var bad = [253, 184, 99];
    var good = [33, 72, 160];
    var c = [0, 1, 2].map(function (i) { return Math.round(bad[i] + (good[i] - bad[i]) * g); });
    return 'rgba(' + c[0] + ',' + c[1] + ',' + c[2] + ',' + (alpha == null ? 1 : alpha) + ')';
  }

  function paletteColor(i, alpha) {
    var hue = (i * 137.508) % 360;
    return 'hsla(' + hue.toFixed(1) + ',62%,42%,' + (alpha == null ? 0.9 : alpha) + ')';
  }

  // ---------------------------------------------------------------- notice

  // kind: 'transient' notices (loading, host not reachable, poll errors) are
  // cleared by the next successful poll; 'action' notices stay until replaced.
  function notice(text, level, kind) {
    var el = $('notice');
    if (!el) return;
    el.textContent = text;
    el.className = 'notice ' + (level || 'info');
    noticeKind = kind || 'action';
  }

  function clearNotice(kind) {
    if (kind && noticeKind !== kind) return;
    var el = $('notice');
    if (!el) return;
    el.textContent = '';
    el.className = 'notice empty';
    noticeKind = '';
  }

  // ---------------------------------------------------------------- API

  function mkErr(kind, message, status) {
    var e = new Error(message);
    e.kind = kind;
    e.status = status || 0;
    return e;
  }

  function errText(e) {
    if (!e) return 'unknown error';
    if (e.kind) return e.message;
    return 'UI error: ' + (e.message || String(e));
  }

  async function api(path, opts) {
    var resp;
    var o = Object.assign({ credentials: 'same-origin', cache: 'no-store' }, opts || {});
    try {
      resp = await fetch(path, o);
    } catch (e) {
      throw mkErr('net', 'host not reachable: ' + ((e && e.message) || String(e)));
    }
    var text = '';
    try {
      text = await resp.text();
    } catch (e) {
      throw mkErr('net', 'host not reachable: ' + ((e && e.message) || String(e)));
    }
    var body = null;
    var parsed = false;
    if (text) {
      try { body = JSON.parse(text); parsed = true; } catch (e) { parsed = false; }
    }
    if (resp.status === 401) throw mkErr('auth', AUTH_TEXT, 401);
    if (!resp.ok) {
      var msg = '';
      if (body && typeof body === 'object') msg = str(body.message) || str(body.error);
      throw mkErr('http', (msg || 'request failed') + ' (HTTP ' + resp.status + ')', resp.status);
    }
    if (!parsed) throw mkErr('http', 'error: unreadable reply from ' + path);
    return { body: body, text: text };
  }

  function postJson(path, obj) {
    return api(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(obj || {})
    });
  }

  // ---------------------------------------------------------------- data in

  function setTrials(reply, text) {
    if (text != null && text === state.trialsText && state.trials) return;
    var arr = [];
    if (Array.isArray(reply)) arr = reply;
    else if (reply && Array.isArray(reply.trials)) arr = reply.trials;
    arr = arr.filter(function (t) { return t && typeof t === 'object'; });
    state.trials = arr;
    state.trialsText = text;
    state.trialsVersion++;
  }

  function setMetrics(reply, text) {
    if (text != null && text === state.metricsText) return;
    var arr = [];
    if (Array.isArray(reply)) arr = reply;
    else if (reply && Array.isArray(reply.metrics)) arr = reply.metrics;
    state.metrics = arr.filter(function (m) { return m && typeof m === 'object'; });
    state.metricsText = text;
    state.metricsVersion++;
  }

  // ---------------------------------------------------------------- derived

  function getDerived() {
    var key = state.trialsVersion + ':' + state.metricsVersion + ':' + optimizeMode();
    if (!state.derived || state.derivedKey !== key) {
      state.derived = derive();
      state.derivedKey = key;
    }
    return state.derived;
  }

  function derive() {
    var trials = (state.trials || []).slice();
    trials.sort(function (a, b) {
      var x = isNum(a.sequence_id) ? a.sequence_id : Infinity;
      var y = isNum(b.sequence_id) ? b.sequence_id : Infinity;
      return x - y || 0;
    });
    var maximize = optimizeMode() === 'maximize';

    // Parameter names: union over trials, in order of first appearance.
    var paramNames = [];
    var nameIndex = new Map();
    trials.forEach(function (t) {
      Object.keys(paramsOf(t)).forEach(function (k) {
        if (!nameIndex.has(k)) { nameIndex.set(k, paramNames.length); paramNames.push(k); }
      });
    });

    // Parameter kinds and ranges.
    var infos = paramNames.map(function (name) {
      var numeric = true;
      var any = false;
      var min = Infinity;
      var max = -Infinity;
      var cats = new Set();
      trials.forEach(function (t) {
        var v = paramValue(t, name);
        if (v === undefined) return;
        any = true;
        if (isNum(v)) {
          if (v < min) min = v;
          if (v > max) max = v;
        } else {
          numeric = false;
        }
        cats.add(valueText(v));
      });
      var info = { name: name, numeric: numeric && any, min: min, max: max, cats: [], catIndex: new Map() };
      // Positive numeric parameters spanning >= 2 decades are shown on log axes.
      info.log = info.numeric && min > 0 && max / min >= 100;
      if (!info.numeric) {
        info.cats = Array.from(cats).sort(function (a, b) {
          return a.localeCompare(b, undefined, { numeric: true });
        });
        info.cats.forEach(function (c, i) { info.catIndex.set(c, i); });
      }
      return info;
    });

    // Intermediate curves from PERIODICAL records, by trial.
    var curves = new Map();
    state.metrics.forEach(function (m) {
      if (m.type !== 'PERIODICAL') return;
      var id = str(m.trial_id);
      var c = curves.get(id);
      if (!c) { c = []; curves.set(id, c); }
      c.push({ x: isNum(m.sequence) ? m.sequence : c.length, y: scalar(m.value) });
    });
    curves.forEach(function (c) {
      for (var i = 1; i < c.length; i++) {
        if (c[i].x < c[i - 1].x) { c.sort(function (a, b) { return a.x - b.x; }); break; }
      }
    });

    var rowById = new Map();
    var rows = trials.map(function (t) {
      var st = isNum(t.start_time) && t.start_time > 0 ? t.start_time : null;
      var en = isNum(t.end_time) && t.end_time > 0 ? t.end_time : null;
      var r = {
        t: t,
        seq: isNum(t.sequence_id) ? t.sequence_id : null,
        id: str(t.trial_id),
        status: str(t.status),
        metric: scalar(t.final),
        duration: st !== null && en !== null ? Math.max(0, en - st) : null,
        attempt: isNum(t.attempt) ? t.attempt : null,
        worker: t.worker_id == null ? null : str(t.worker_id),
        pv: paramNames.map(function (n) { return paramValue(t, n); })
      };
      r.pt = r.pv.map(valueText);
      if (!rowById.has(r.id)) rowById.set(r.id, r);
      return r;
    });

    var done = rows.filter(function (r) { return r.status === 'SUCCEEDED' && r.metric !== null; });
    var succeeded = rows.filter(function (r) { return r.status === 'SUCCEEDED'; });
    var durations = [];
    rows.forEach(function (r) {
      if (ENDED.has(r.status) && r.duration !== null) durations.push(r.duration);
    });
    var meanDuration = null;
    if (durations.length) {
      meanDuration = durations.reduce(function (a, b) { return a + b; }, 0) / durations.length;
    }
    var mMin = Infinity;
    var mMax = -Infinity;
    done.forEach(function (r) {
      if (r.metric < mMin) mMin = r.metric;
      if (r.metric > mMax) mMax = r.metric;
    });

    // Cheap signature of the intermediate curves (changes when a curve grows
    // or a trial's early-stopped state changes).
    var csig = [];
    rows.forEach(function (r) {
      var c = curves.get(r.id);
      if (!c || !c.length) return;
      var last = c[c.length - 1];
      csig.push(r.seq + ':' + r.id + ':' + (r.status === 'EARLY_STOPPED' ? 'E' : '') + c.length + ':' + last.x + ':' + last.y);
    });
    curves.forEach(function (c, id) {
      if (!rowById.has(id) && c.length) csig.push('?' + id + ':' + c.length + ':' + c[c.length - 1].y);
    });

    // Signatures of what the table and the parallel-coordinates plot show,
    // so that unrelated changes (e.g. intermediate counts) do not redraw them.
    var tsig = rows.map(function (r) {
      return r.seq + '\u0001' + r.id + '\u0001' + r.status + '\u0001' + r.metric + '\u0001' + r.duration +
        '\u0001' + r.attempt + '\u0001' + r.worker + '\u0001' + r.pt.join('\u0002');
    }).join('\n');
    var psig = JSON.stringify(infos.map(function (i) {
      return [i.name, i.numeric, i.numeric ? [i.min, i.max] : i.cats];
    })) + (maximize ? 'max' : 'min') + succeeded.map(function (r) {
      return r.seq + ':' + r.id + ':' + r.metric;
    }).join('|');

    var d = {
      tableSig: tsig,
      parallelSig: psig,
      curveSig: csig.join('|'),
      trials: trials,
      rows: rows,
      rowById: rowById,
      paramNames: paramNames,
      infos: infos,
      curves: curves,
      done: done,
      succeeded: succeeded,
      durations: durations,
      meanDuration: meanDuration,
      maximize: maximize,
      metricMin: mMin,
      metricMax: mMax
    };
    d.importance = computeImportance(d);
    return d;
  }

  // Goodness of a metric value in [0, 1] (1 = best) over the finished trials.
  function goodness(d, v) {
    if (!isNum(v)) return null;
    if (!(d.metricMax > d.metricMin)) return 0.5;
    var g = (v - d.metricMin) / (d.metricMax - d.metricMin);
    return d.maximize ? g : 1 - g;
  }

  // First-order (fANOVA-style) importance: eta² of each parameter's marginal,
  // numeric params in up to 5 quantile bins, categorical by value.
  function computeImportance(d) {
    var rows = d.done;
    if (rows.length < 4) return { ok: false, reason: 'needs at least 4 finished trials' };
    if (!d.paramNames.length) return { ok: false, reason: 'no parameters' };
    var n = rows.length;
    var mean = rows.reduce(function (a, r) { return a + r.metric; }, 0) / n;
    var sst = rows.reduce(function (a, r) { return a + (r.metric - mean) * (r.metric - mean); }, 0);
    var raw = d.infos.map(function (info, pi) {
      var groups = new Map();
      var add = function (key, y) {
        var g = groups.get(key);
        if (!g) { g = { s: 0, c: 0 }; groups.set(key, g); }
        g.s += y;
        g.c += 1;
      };
      if (info.numeric) {
        var present = [];
        rows.forEach(function (r) {
          var v = r.pv[pi];
          if (isNum(v)) present.push([v, r.metric]);
          else add('\u0000missing', r.metric);
        });
        present.sort(function (a, b) { return a[0] - b[0]; });
        var distinct = 0;
        present.forEach(function (p, j) { if (j === 0 || p[0] !== present[j - 1][0]) distinct++; });
        var k = Math.min(5, distinct);
        var start = 0;
        present.forEach(function (p, j) {
          if (j === 0 || p[0] !== present[j - 1][0]) start = j;
          var bin = Math.min(k - 1, Math.floor(start * k / present.length));
          add('b' + bin, p[1]);
        });
      } else {
        rows.forEach(function (r) {
          var t = r.pt[pi];
          add(t === null ? '\u0000missing' : 'c' + t, r.metric);
        });
      }
      var ssb = 0;
      groups.forEach(function (g) {
        var gm = g.s / g.c;
        ssb += g.c * (gm - mean) * (gm - mean);
      });
      return sst > 0 ? Math.max(0, Math.min(1, ssb / sst)) : 0;
    });
    var sum = raw.reduce(function (a, b) { return a + b; }, 0);
    var items = d.paramNames.map(function (name, i) {
      return { name: name, index: i, raw: raw[i], value: sum > 0 ? raw[i] / sum : 0 };
    });
    items.sort(function (a, b) { return b.value - a.value || a.index - b.index; });
    if (!(sst > 0)) return { ok: false, reason: 'the metric has no variance: importance undefined', items: items };
    return { ok: true, items: items, n: n };
  }

