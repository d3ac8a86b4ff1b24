/*
 * tunehost web UI (plain ES2017, no build step).
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

  // ---------------------------------------------------------------- charts

  function chartLib() { return typeof window.Chart === 'function' ? window.Chart : null; }

  // Create the chart on first use; afterwards update it in place, skipping the
  // redraw when the signature did not change.
  // Heavy charts (thousands of datasets/points) are throttled: an update that
  // took `cost` ms is not repeated within 5 × cost ms; the skipped update is
  // done by a later refresh (the page re-renders on every poll).
  var chartCost = {};
  var chartLast = {};

  function now() { return window.performance && performance.now ? performance.now() : Date.now(); }

  function setChart(id, sig, makeConfig, applyUpdate) {
    var ch = window.tunehostCharts[id];
    if (ch && chartSigs[id] === sig) return ch;
    var C = chartLib();
    if (!C) return null;
    var t0 = now();
    if (ch && chartCost[id] > 250 && t0 - chartLast[id] < 5 * chartCost[id]) return ch;
    var cfg = makeConfig();
    if (!ch) {
      var canvas = $(id);
      if (!canvas) return null;
      ch = new C(canvas, cfg);
      window.tunehostCharts[id] = ch;
    } else {
      ch.data = cfg.data;
      if (applyUpdate) applyUpdate(ch, cfg);
      ch.update('none');
    }
    chartSigs[id] = sig;
    var t1 = now();
    chartCost[id] = t1 - t0;
    chartLast[id] = t1;
    return ch;
  }

  function destroyChart(id) {
    var ch = window.tunehostCharts[id];
    if (ch) {
      try { ch.destroy(); } catch (e) { /* ignore */ }
      delete window.tunehostCharts[id];
    }
    delete chartSigs[id];
  }

  function axisTitle(text) {
    return { display: !!text, text: text };
  }

  function renderHistory(d) {
    var pts = d.done.map(function (r) { return { x: r.seq, y: r.metric, trial: r.id }; });
    var best = null;
    var bestLine = pts.map(function (p) {
      best = best === null ? p.y : d.maximize ? Math.max(best, p.y) : Math.min(best, p.y);
      return { x: p.x, y: best };
    });
    var sig = JSON.stringify([d.maximize, pts]);
    setChart('chart-history', sig, function () {
      return {
        type: 'scatter',
        data: {
          datasets: [{
            label: 'final metric (succeeded trials)',
            data: pts,
            backgroundColor: 'rgba(37,99,235,0.75)',
            borderColor: 'rgba(37,99,235,1)',
            pointRadius: pts.length > 1000 ? 2 : 3.5
          }, {
            type: 'line',
            label: 'best so far (' + (d.maximize ? 'max' : 'min') + ')',
            data: bestLine,
            stepped: true,
            showLine: true,
            fill: false,
            borderColor: 'rgba(234,88,12,0.95)',
            backgroundColor: 'rgba(234,88,12,0.95)',
            borderWidth: 2,
            pointRadius: 0
          }]
        },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          parsing: true,
          scales: {
            x: { type: 'linear', title: axisTitle('trial # (sequence id)') },
            y: { type: 'linear', title: axisTitle('metric') }
          },
          plugins: {
            legend: { display: true },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var raw = ctx.raw || {};
                  var pre = ctx.datasetIndex === 0 ? 'trial ' + str(raw.trial) + ' #' : 'best at #';
                  return pre + raw.x + ': ' + fmtNum(raw.y);
                }
              }
            }
          },
          onClick: function (evt, els) {
            if (!els || !els.length || els[0].datasetIndex !== 0) return;
            var p = pts[els[0].index];
            var ch = window.tunehostCharts['chart-history'];
            var ds = ch && ch.data.datasets[0];
            var raw = ds && ds.data[els[0].index];
            var tid = raw ? raw.trial : p && p.trial;
            if (tid != null) selectTrial(tid);
          }
        }
      };
    });
  }

  function renderIntermediate(d) {
    setChart('chart-intermediate', d.curveSig, function () {
      var datasets = [];
      var many = d.curves.size > 50;
      d.rows.forEach(function (r) {
        var c = d.curves.get(r.id);
        if (!c || !c.length) return;
        var early = r.status === 'EARLY_STOPPED';
        var color = early ? 'rgba(220,53,69,0.85)' : paletteColor(datasets.length, many ? 0.55 : 0.9);
        datasets.push({
          label: '#' + (r.seq === null ? '?' : r.seq) + ' ' + r.id + (early ? ' (early stopped)' : ''),
          data: c.map(function (p) { return { x: p.x, y: p.y }; }),
          borderColor: color,
          backgroundColor: color,
          borderDash: early ? [6, 4] : [],
          borderWidth: many ? 1 : 1.6,
          pointRadius: many ? 0 : 2,
          fill: false,
          tension: 0,
          spanGaps: false
        });
      });
      // Trials that appear only in the metrics (unknown to the trial list).
      var known = d.rowById;
      d.curves.forEach(function (c, id) {
        if (known.has(id) || !c.length) return;
        var color = paletteColor(datasets.length, 0.9);
        datasets.push({
          label: id, data: c.map(function (p) { return { x: p.x, y: p.y }; }),
          borderColor: color, backgroundColor: color, borderWidth: 1.6,
          pointRadius: many ? 0 : 2, fill: false, tension: 0
        });
      });
      return {
        type: 'line',
        data: { datasets: datasets },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          interaction: { mode: 'nearest', intersect: false },
          scales: {
            x: { type: 'linear', title: axisTitle('report sequence') },
            y: { type: 'linear', title: axisTitle('intermediate metric') }
          },
          plugins: {
            legend: { display: datasets.length <= 10 },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var raw = ctx.raw || {};
                  return str(ctx.dataset && ctx.dataset.label) + ' @' + raw.x + ': ' + fmtNum(raw.y);
                }
              }
            }
          }
        }
      };
    }, function (ch, cfg) {
      ch.options = cfg.options;
    });
  }

  function histogram(values, nbins) {
    if (!values.length) return { labels: [], counts: [] };
    var min = Infinity;
    var max = -Infinity;
    values.forEach(function (v) { if (v < min) min = v; if (v > max) max = v; });
    if (!(max - min > 1e-9)) return { labels: [fmtSeconds(min)], counts: [values.length] };
    var w = (max - min) / nbins;
    var counts = new Array(nbins).fill(0);
    values.forEach(function (v) {
      var i = Math.floor((v - min) / w);
      if (i >= nbins) i = nbins - 1;
      if (i < 0) i = 0;
      counts[i]++;
    });
    var labels = counts.map(function (c, i) {
      return fmtSeconds(min + i * w) + '–' + fmtSeconds(min + (i + 1) * w);
    });
    return { labels: labels, counts: counts };
  }

  function renderDurations(d) {
    var h = histogram(d.durations, 10);
    var sig = JSON.stringify(h);
    setChart('chart-durations', sig, function () {
      return {
        type: 'bar',
        data: {
          labels: h.labels,
          datasets: [{
            label: 'ended trials',
            data: h.counts,
            backgroundColor: 'rgba(13,148,136,0.7)',
            borderColor: 'rgba(13,148,136,1)',
            borderWidth: 1,
            barPercentage: 1.0,
            categoryPercentage: 0.95
          }]
        },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { title: axisTitle('duration (s)') },
            y: { beginAtZero: true, title: axisTitle('trials'), ticks: { precision: 0 } }
          },
          plugins: { legend: { display: false } }
        }
      };
    });
  }

  var IMPORTANCE_TITLE = 'Parameter importance (first-order variance share)';

  function renderImportance(d) {
    var imp = d.importance;
    var note = $('importance-note');
    var items = imp.ok ? imp.items : [];
    if (note) {
      note.hidden = imp.ok;
      note.textContent = imp.ok ? '' : imp.reason;
    }
    var box = $('importance-box');
    if (box) {
      var hpx = Math.max(240, Math.min(900, 22 * items.length + 80));
      if (box.style.height !== hpx + 'px') box.style.height = hpx + 'px';
    }
    var labels = items.map(function (it) { return truncate(it.name, 40); });
    var values = items.map(function (it) { return Number(it.value.toFixed(6)); });
    var names = items.map(function (it) { return it.name; });
    var sig = JSON.stringify([names, values]);
    setChart('chart-importance', sig, function () {
      return {
        type: 'bar',
        data: {
          labels: labels,
          datasets: [{
            label: 'share of metric variance',
            data: values,
            backgroundColor: 'rgba(124,58,237,0.7)',
            borderColor: 'rgba(124,58,237,1)',
            borderWidth: 1
          }]
        },
        options: {
          indexAxis: 'y',
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { beginAtZero: true, suggestedMax: 1, title: axisTitle('importance (normalized, sums to 1)') },
            y: { ticks: { autoSkip: false } }
          },
          plugins: {
            title: { display: true, text: IMPORTANCE_TITLE },
            legend: { display: false },
            tooltip: {
              callbacks: {
                title: function (tt) {
                  var i = tt && tt.length ? tt[0].dataIndex : -1;
                  return i >= 0 && i < names.length ? names[i] : '';
                },
                label: function (ctx) { return (100 * (ctx.raw || 0)).toFixed(1) + ' %'; }
              }
            }
          }
        }
      };
    }, function (ch, cfg) {
      ch.options = cfg.options;
    });
  }

  // Numeric position of a parameter value on its axis (category index for
  // categorical parameters), or null when missing.
  function paramPos(info, v) {
    if (v === undefined || v === null) return null;
    if (info.numeric) return isNum(v) ? v : null;
    var i = info.catIndex.get(valueText(v));
    return i === undefined ? null : i;
  }

  function sliceScale(info, label) {
    if (info.numeric) {
      return {
        type: info.log ? 'logarithmic' : 'linear',
        title: axisTitle(truncate(label, 60) + (info.log ? ' (log)' : '')),
        ticks: { maxRotation: 0, autoSkip: true }
      };
    }
    var cats = info.cats;
    return {
      type: 'linear',
      min: -0.5,
      max: Math.max(0.5, cats.length - 0.5),
      // One tick per category, at the integer positions.
      afterBuildTicks: function (scale) {
        scale.ticks = cats.map(function (c, i) { return { value: i }; });
      },
      ticks: {
        autoSkip: true,
        maxRotation: 45,
        callback: function (v) {
          return Number.isInteger(v) && v >= 0 && v < cats.length ? truncate(cats[v], 16) : '';
        }
      },
      title: axisTitle(truncate(label, 60))
    };
  }

  function renderSlices(d) {
    var container = $('slices');
    var note = $('slices-note');
    if (!container) return;
    var n = d.paramNames.length;
    if (note) {
      note.hidden = n > 0;
      note.textContent = n > 0 ? '' : 'no parameters yet';
    }
    // Remove extra slices (the parameter list shrank).
    for (var i = n; ; i++) {
      var el = $('slice-' + i);
      if (!el) break;
      destroyChart('slice-' + i);
      if (el.parentElement) el.parentElement.remove();
    }
    if (!chartLib()) return;
    d.infos.forEach(function (info, pi) {
      var id = 'slice-' + pi;
      if (!$(id)) {
        var box = document.createElement('div');
        box.className = 'slice-box';
        var canvas = document.createElement('canvas');
        canvas.id = id;
        box.appendChild(canvas);
        container.appendChild(box);
      }
      var pts = [];
      d.done.forEach(function (r) {
        var x = paramPos(info, r.pv[pi]);
        if (x === null) return;
        pts.push({ x: x, y: r.metric, trial: r.id });
      });
      var sig = JSON.stringify([info.name, info.numeric, info.numeric ? 0 : info.cats, pts, d.maximize]);
      var makeOptions = function () {
        return {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: sliceScale(info, info.name),
            y: { type: 'linear', title: axisTitle('metric') }
          },
          plugins: {
            legend: { display: false },
            title: { display: true, text: truncate(info.name, 60) },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var raw = ctx.raw || {};
                  var xs = info.numeric ? fmtNum(raw.x) : str(info.cats[raw.x]);
                  return 'trial ' + str(raw.trial) + ': ' + xs + ' → ' + fmtNum(raw.y);
                }
              }
            }
          }
        };
      };
      setChart(id, sig, function () {
        return {
          type: 'scatter',
          data: {
            datasets: [{
              label: info.name,
              data: pts,
              pointRadius: pts.length > 1000 ? 1.5 : 3,
              backgroundColor: pts.map(function (p) { return goodColor(goodness(d, p.y), 0.85); }),
              borderColor: 'rgba(0,0,0,0)'
            }]
          },
          options: makeOptions()
        };
      }, function (ch) {
        ch.options = makeOptions();
      });
    });
  }

  function renderContour(d) {
    var box = $('contour-box');
    var note = $('contour-note');
    var title = $('contour-title');
    var numeric = [];
    if (d.importance.items) {
      d.importance.items.forEach(function (it) { if (d.infos[it.index].numeric) numeric.push(it.index); });
    } else {
      d.infos.forEach(function (info, i) { if (info.numeric) numeric.push(i); });
    }
    if (numeric.length < 2) {
      if (box) box.hidden = true;
      if (note) {
        note.hidden = false;
        note.textContent = 'needs at least two numeric parameters';
      }
      if (title) title.textContent = '2-parameter map';
      return;
    }
    if (box) box.hidden = false;
    if (note) { note.hidden = true; note.textContent = ''; }
    var a = numeric[0];
    var b = numeric[1];
    var na = d.paramNames[a];
    var nb = d.paramNames[b];
    var heading = '2-parameter map: ' + na + ' × ' + nb + (d.importance.ok ? ' (two most important numeric parameters)' : '');
    if (title) title.textContent = heading;
    var pts = [];
    d.done.forEach(function (r) {
      var x = r.pv[a];
      var y = r.pv[b];
      if (isNum(x) && isNum(y)) pts.push({ x: x, y: y, m: r.metric, trial: r.id });
    });
    var colors = pts.map(function (p) { return goodColor(goodness(d, p.m), 0.9); });
    var sig = JSON.stringify([na, nb, pts, d.maximize]);
    var makeOptions = function () {
      return {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: {
          x: sliceScale(d.infos[a], na),
          y: sliceScale(d.infos[b], nb)
        },
        plugins: {
          legend: { display: false },
          title: { display: true, text: truncate(na, 40) + ' × ' + truncate(nb, 40) + ' (color = metric, dark blue = better)' },
          tooltip: {
            callbacks: {
              label: function (ctx) {
                var raw = ctx.raw || {};
                return 'trial ' + str(raw.trial) + ': ' + fmtNum(raw.x) + ', ' + fmtNum(raw.y) + ' → ' + fmtNum(raw.m);
              }
            }
          }
        }
      };
    };
    setChart('chart-contour', sig, function () {
      return {
        type: 'scatter',
        data: {
          datasets: [{
            label: na + ' × ' + nb,
            data: pts,
            pointRadius: pts.length > 1000 ? 2.5 : 5,
            pointHoverRadius: 7,
            backgroundColor: colors,
            borderColor: 'rgba(0,0,0,0.25)',
            borderWidth: 0.5
          }]
        },
        options: makeOptions()
      };
    }, function (ch) {
      ch.options = makeOptions();
    });
  }

  // Parallel coordinates, drawn by hand on a 2D canvas.
  function renderParallel(d, force) {
    var canvas = $('chart-parallel');
    if (!canvas || !canvas.getContext) return;
    var box = canvas.parentElement;
    var cssW = Math.max(240, Math.floor(box ? box.clientWidth : 800));
    var cssH = Math.max(160, Math.floor(box ? box.clientHeight : 320));
    var dpr = window.devicePixelRatio || 1;
    var sig = d.parallelSig + '|' + cssW + 'x' + cssH + '@' + dpr;
    if (!force && sig === parallelSig) return;
    parallelSig = sig;
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    canvas.style.width = cssW + 'px';
    canvas.style.height = cssH + 'px';
    var ctx = canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.font = '12px system-ui, sans-serif';

    var lines = d.succeeded;
    // Axes: one per parameter, then the metric.
    var axes = d.infos.map(function (info, pi) {
      var ax = { label: info.name + (info.log ? ' (log)' : ''), pi: pi, numeric: info.numeric, info: info };
      if (info.numeric) {
        ax.lo = info.min;
        ax.hi = info.max;
        if (info.log) {
          ax.log = true;
          ax.lo = Math.log(info.min);
          ax.hi = Math.log(info.max);
        }
      }
      return ax;
    });
    axes.push({ label: 'metric (' + (d.maximize ? 'max' : 'min') + ')', metric: true, numeric: true,
      lo: d.metricMin, hi: d.metricMax });

    var left = 50;
    var right = 70;
    var top = 44;
    var bottom = 18;
    var plotH = cssH - top - bottom;
    var nAx = axes.length;
    var span = nAx > 1 ? (cssW - left - right) / (nAx - 1) : 0;
    axes.forEach(function (ax, i) { ax.x = nAx > 1 ? left + i * span : cssW / 2; });

    // Fraction in [0, 1] along an axis (1 = top) or null.
    var frac = function (ax, v) {
      if (ax.numeric) {
        if (!isNum(v)) return null;
        if (ax.log) v = v > 0 ? Math.log(v) : ax.lo;
        if (!(ax.hi > ax.lo)) return 0.5;
        return (v - ax.lo) / (ax.hi - ax.lo);
      }
      var idx = paramPos(ax.info, v);
      if (idx === null) return null;
      var n = ax.info.cats.length;
      return n <= 1 ? 0.5 : 1 - idx / (n - 1);
    };
    var yOf = function (f) { return top + (1 - f) * plotH; };

    if (!lines.length) {
      ctx.fillStyle = '#667085';
      ctx.textAlign = 'center';
      ctx.fillText('no succeeded trials yet', cssW / 2, cssH / 2);
    }

    // Fraction of a trial on an axis (1 = top) or null when missing.
    var lineFrac = function (ax, r) {
      if (ax.metric) return frac(ax, r.metric);
      if (ax.numeric) return frac(ax, r.pv[ax.pi]);
      var t = r.pt[ax.pi];
      if (t === null) return null;
      var idx = ax.info.catIndex.get(t);
      if (idx === undefined) return null;
      var n = ax.info.cats.length;
      return n <= 1 ? 0.5 : 1 - idx / (n - 1);
    };

    // Lines grouped into colour buckets (one path per bucket: fast for
    // thousands of trials), worst first so the best end up on top; trials
    // without a metric in grey, below everything.
    var NB = 24;
    var buckets = [];
    for (var bi = 0; bi <= NB; bi++) buckets.push([]);
    lines.forEach(function (r) {
      var g = goodness(d, r.metric);
      buckets[g === null ? 0 : 1 + Math.min(NB - 1, Math.floor(g * NB))].push(r);
    });
    var alpha = lines.length > 1000 ? 0.3 : lines.length > 200 ? 0.5 : 0.85;
    ctx.lineWidth = lines.length > 1000 ? 1 : 1.4;
    ctx.lineJoin = 'round';
    var drawn = 0;
    buckets.forEach(function (list, b) {
      if (!list.length) return;
      ctx.strokeStyle = b === 0 ? 'rgba(160,160,160,' + alpha + ')' : goodColor((b - 0.5) / NB, alpha);
      ctx.beginPath();
      list.forEach(function (r) {
        var prev = false;
        for (var ai = 0; ai < axes.length; ai++) {
          var ax = axes[ai];
          var f = lineFrac(ax, r);
          if (f === null) { prev = false; continue; }
          var y = yOf(f);
          if (prev) ctx.lineTo(ax.x, y);
          else ctx.moveTo(ax.x, y);
          prev = true;
        }
        drawn++;
      });
      ctx.stroke();
    });

    // Axes, labels on top, tick labels.
    var labelW = nAx > 1 ? Math.max(40, span - 8) : cssW - 20;
    var fit = function (text, w) {
      text = String(text);
      if (ctx.measureText(text).width <= w) return text;
      var lo = 0;
      var hi = text.length;
      while (lo < hi) {
        var mid = (lo + hi + 1) >> 1;
        if (ctx.measureText(text.slice(0, mid) + '…').width <= w) lo = mid;
        else hi = mid - 1;
      }
      return text.slice(0, lo) + '…';
    };
    axes.forEach(function (ax, i) {
      ctx.strokeStyle = '#374151';
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(ax.x, top);
      ctx.lineTo(ax.x, top + plotH);
      ctx.stroke();
      ctx.fillStyle = '#111827';
      ctx.font = 'bold 12px system-ui, sans-serif';
      ctx.textAlign = i === 0 && nAx > 1 ? 'left' : i === nAx - 1 && nAx > 1 ? 'right' : 'center';
      var lx = ax.x;
      if (i === 0 && nAx > 1) lx = Math.max(4, ax.x - 30);
      if (i === nAx - 1 && nAx > 1) lx = Math.min(cssW - 4, ax.x + 40);
      ctx.fillText(fit(ax.label, labelW), lx, 16);
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillStyle = '#4b5563';
      ctx.textAlign = 'left';
      var tick = function (f, text) {
        var y = yOf(f);
        ctx.beginPath();
        ctx.moveTo(ax.x - 3, y);
        ctx.lineTo(ax.x + 3, y);
        ctx.stroke();
        var t = fit(text, Math.max(30, Math.min(110, span - 12)));
        var w = ctx.measureText(t).width;
        var tx = ax.x + 5;
        if (tx + w > cssW - 2) tx = ax.x - 5 - w;
        ctx.fillText(t, tx, y + 4);
      };
      if (ax.numeric) {
        if (isNum(ax.lo) && isNum(ax.hi)) {
          var val = function (f) {
            var x = ax.lo + f * (ax.hi - ax.lo);
            return ax.log ? Math.exp(x) : x;
          };
          if (ax.hi > ax.lo) {
            tick(1, fmtNum(val(1)));
            tick(0.5, fmtNum(val(0.5)));
            tick(0, fmtNum(val(0)));
          } else {
            tick(0.5, fmtNum(val(0)));
          }
        }
      } else {
        var cats = ax.info.cats;
        var nc = cats.length;
        var maxTicks = Math.max(2, Math.floor(plotH / 16));
        var step = Math.max(1, Math.ceil(nc / maxTicks));
        for (var c = 0; c < nc; c += step) tick(nc <= 1 ? 0.5 : 1 - c / (nc - 1), cats[c]);
        if (nc > 1 && (nc - 1) % step !== 0) tick(0, cats[nc - 1]);
      }
    });
    canvas.dataset.lines = String(drawn);
  }

  function renderCharts(d) {
    var C = chartLib();
    var parts = [
      function () { renderParallel(d, false); }
    ];
    if (C) {
      parts = parts.concat([
        function () { renderHistory(d); },
        function () { renderIntermediate(d); },
        function () { renderDurations(d); },
        function () { renderImportance(d); },
        function () { renderContour(d); },
        function () { renderSlices(d); }
      ]);
    }
    var firstErr = null;
    parts.forEach(function (fn) {
      try { fn(); } catch (e) { if (!firstErr) firstErr = e; }
    });
    if (!C) notice('chart library not loaded: charts are unavailable', 'error', 'transient');
    if (firstErr) throw firstErr;
  }

  // ---------------------------------------------------------------- header/overview

  function renderHeader() {
    var st = state.status;
    setText('experiment-id', st && st.experiment_id ? st.experiment_id : '—');
    var sb = $('status-badge');
    if (sb) {
      var s = st ? str(st.status) : '';
      sb.textContent = s || '—';
      sb.className = 'badge st-' + safeClass(s);
    }
    var rb = $('role-badge');
    if (rb) {
      var role = state.report ? 'report' : state.session ? str(state.session.role) || 'viewer' : '—';
      rb.textContent = role;
      rb.className = 'badge role ' + safeClass(role);
    }
    var rep = $('report-badge');
    if (rep) rep.hidden = !state.report;
    var ver = state.session && state.session.version ? 'tunehost ' + state.session.version : '';
    if (state.session && state.session.read_only && !state.report) ver = (ver ? ver + ' · ' : '') + 'read-only';
    setText('version', ver);
  }

  function endedCount(counts) {
    var n = 0;
    ENDED.forEach(function (k) { if (isNum(counts[k])) n += counts[k]; });
    return n;
  }

  function computeEta(st, d) {
    if (!st || FINISHED.has(st.status)) return null;
    var c = [];
    var counts = st.counts && typeof st.counts === 'object' ? st.counts : {};
    if (isNum(st.max_trials) && st.max_trials > 0 && d.meanDuration !== null) {
      var remaining = Math.max(0, st.max_trials - endedCount(counts));
      var conc = isNum(st.concurrency) && st.concurrency > 0 ? st.concurrency : 1;
      c.push(remaining * d.meanDuration / conc);
    }
    if (isNum(st.max_duration_s) && st.max_duration_s > 0) {
      c.push(Math.max(0, st.max_duration_s - (isNum(st.elapsed_s) ? st.elapsed_s : 0)));
    }
    return c.length ? Math.min.apply(null, c) : null;
  }

  function renderOverview(d) {
    var st = state.status;
    if (!st) return;
    var counts = st.counts && typeof st.counts === 'object' ? st.counts : {};
    setText('ov-status', str(st.status) || '—');
    var ended = endedCount(counts);
    var budget = isNum(st.max_trials) && st.max_trials > 0 ? String(st.max_trials) : 'unlimited';
    setText('ov-trials', ended + ' / ' + budget);
    setText('ov-running', isNum(counts.RUNNING) ? counts.RUNNING : 0);
    setText('ov-waiting', isNum(counts.WAITING) ? counts.WAITING : 0);
    setText('ov-elapsed', fmtDuration(st.elapsed_s));
    setText('ov-budget', isNum(st.max_duration_s) && st.max_duration_s > 0 ? fmtDuration(st.max_duration_s) : 'unlimited');
    setText('ov-concurrency', isNum(st.concurrency) ? st.concurrency : '—');
    var eta = computeEta(st, d);
    setText('ov-eta', eta === null ? '—' : fmtDuration(eta));
    setText('ov-mode', optimizeMode());
    var b = st.best;
    if (b && typeof b === 'object') {
      setText('ov-best', str(b.trial_id) + '  #' + (isNum(b.sequence_id) ? b.sequence_id : '?') +
        '  metric ' + fmtNum(scalar(b.metric)));
    } else {
      setText('ov-best', '—');
    }
    var ce = $('ov-counts');
    if (ce) {
      var keys = Object.keys(counts).filter(function (k) { return isNum(counts[k]) && counts[k] !== 0; });
      keys.sort(function (a, b2) {
        var ia = TRIAL_STATUSES.indexOf(a);
        var ib = TRIAL_STATUSES.indexOf(b2);
        return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a < b2 ? -1 : a > b2 ? 1 : 0);
      });
      var html = keys.map(function (k) {
        return '<span class="count-item"><span class="st st-' + safeClass(k) + '">' + escapeHtml(k) +
          '</span> ' + escapeHtml(counts[k]) + '</span>';
      }).join('');
      var total = d.trials.length;
      html += '<span class="count-item muted">total ' + escapeHtml(total) + '</span>';
      if (ce.innerHTML !== html) ce.innerHTML = html;
    }
    var vurl = !state.report && state.session && typeof state.session.viewer_url === 'string' ?
      state.session.viewer_url : '';
    var vrow = $('ov-viewer-row');
    if (vrow) vrow.hidden = !vurl;
    setText('ov-viewer-url', vurl);
    var err = str(st.error);
    var eb = $('ov-error-box');
    if (eb) eb.hidden = !err;
    setText('ov-error', err);
  }

  // ---------------------------------------------------------------- controls

  var LIMIT_FIELDS = [
    { id: 'limit-concurrency', key: 'concurrency', label: 'concurrency', int: true, min: 1 },
    { id: 'limit-max-trials', key: 'max_trials', label: 'max trials', int: true, min: 0 },
    { id: 'limit-max-duration', key: 'max_duration_s', label: 'max duration', int: false, min: 0 }
  ];

  function fillLimits(st) {
    LIMIT_FIELDS.forEach(function (f) {
      var v = st && isNum(st[f.key]) ? String(st[f.key]) : '';
      var el = $(f.id);
      if (el) el.value = v;
      state.limitsBaseline[f.key] = v;
    });
  }

  function renderControls() {
    var sec = $('controls');
    if (!sec) return;
    var show = controlsAllowed();
    sec.hidden = !show;
    if (show && !state.prefilled && state.status) {
      fillLimits(state.status);
      state.prefilled = true;
    }
  }

  async function applyLimits() {
    if (!controlsAllowed()) {
      notice('limits cannot be changed now', 'error');
      return;
    }
    var body = {};
    var errs = [];
    var changed = 0;
    LIMIT_FIELDS.forEach(function (f) {
      var el = $(f.id);
      if (!el) return;
      var raw = String(el.value).trim();
      if (raw === state.limitsBaseline[f.key]) return;
      changed++;
      if (raw === '') { errs.push(f.label + ': enter a value'); return; }
      var n = Number(raw);
      if (!isFinite(n)) { errs.push(f.label + ': not a number'); return; }
      if (f.int && !Number.isInteger(n)) { errs.push(f.label + ': must be a whole number'); return; }
      if (n < f.min) { errs.push(f.label + ': must be at least ' + f.min); return; }
      body[f.key] = n;
    });
    if (errs.length) { notice('invalid limits: ' + errs.join('; '), 'error'); return; }
    if (!changed) { notice('no limit changed', 'info'); return; }
    var btn = $('apply-limits');
    if (btn) btn.disabled = true;
    try {
      var r = await postJson('api/limits', body);
      var st = r.body && typeof r.body === 'object' ? r.body : null;
      if (st && st.status) {
        state.status = st;
        fillLimits(st);
      } else {
        Object.keys(body).forEach(function (k) { state.limitsBaseline[k] = String(body[k]); });
      }
      notice('limits updated: ' + Object.keys(body).map(function (k) { return k + ' = ' + body[k]; }).join(', '), 'ok');
    } catch (e) {
      notice('could not update limits: ' + errText(e), 'error');
    } finally {
      if (btn) btn.disabled = false;
    }
    refreshSoon();
  }

  async function killTrial(id, btn) {
    if (!actionsAllowed()) return;
    if (btn) btn.disabled = true;
    try {
      await postJson('api/trials/' + encodeURIComponent(id) + '/kill', {});
      notice('kill requested for trial ' + id, 'ok');
    } catch (e) {
      notice('could not kill trial ' + id + ': ' + errText(e), 'error');
      if (btn) btn.disabled = false;
    }
    refreshSoon();
  }

  // ---------------------------------------------------------------- table

  var BASE_COLUMNS = [
    { key: 'seq', label: '#', num: true },
    { key: 'id', label: 'trial id' },
    { key: 'status', label: 'status' },
    { key: 'metric', label: 'metric', num: true },
    { key: 'duration', label: 'duration (s)', num: true },
    { key: 'attempt', label: 'attempt', num: true },
    { key: 'worker', label: 'worker' }
  ];

  function tableColumns(d) {
    var cols = BASE_COLUMNS.slice();
    d.paramNames.forEach(function (name, i) { cols.push({ key: 'p' + i, label: name, param: i }); });
    cols.push({ key: 'actions', label: 'actions', nosort: true });
    return cols;
  }

  function sortValue(r, key) {
    switch (key) {
      case 'seq': return r.seq;
      case 'id': return r.id;
      case 'status': return r.status;
      case 'metric': return r.metric;
      case 'duration': return r.duration;
      case 'attempt': return r.attempt;
      case 'worker': return r.worker;
      default:
        if (key.charAt(0) === 'p') {
          var i = Number(key.slice(1));
          var v = r.pv[i];
          if (v === undefined || v === null) return null;
          return isNum(v) ? v : r.pt[i];
        }
        return null;
    }
  }

  function compareValues(a, b) {
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    var x = String(a);
    var y = String(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }

  function renderTable(d) {
    var table = $('trials');
    if (!table) return;
    var thead = table.tHead || table.createTHead();
    var tbody = table.tBodies[0] || table.createTBody();
    var cols = tableColumns(d);
    if (!cols.some(function (c) { return c.key === state.sort.key && !c.nosort; })) {
      state.sort = { key: 'seq', dir: 1 };
    }
    var allow = actionsAllowed();

    // The header row is rebuilt only when the columns change; the sort
    // indicator is updated in place (elements stay the same across sorts).
    var hsig = JSON.stringify(d.paramNames);
    if (hsig !== theadSig) {
      theadSig = hsig;
      thead.innerHTML = '<tr>' + cols.map(function (c, i) {
        return '<th data-col="' + i + '" data-key="' + escapeHtml(c.key) + '"' +
          (c.nosort ? ' class="nosort"' : '') + ' title="' + escapeHtml(c.label) + '">' +
          escapeHtml(c.label) + '<span class="ind"></span></th>';
      }).join('') + '</tr>';
    }
    var ths = thead.querySelectorAll('th[data-key]');
    for (var h = 0; h < ths.length; h++) {
      var ind = ths[h].querySelector('.ind');
      var k = ths[h].getAttribute('data-key');
      var text = k === state.sort.key ? (state.sort.dir > 0 ? '▲' : '▼') : '';
      if (ind && ind.textContent !== text) ind.textContent = text;
      var aria = k === state.sort.key ? (state.sort.dir > 0 ? 'ascending' : 'descending') : 'none';
      if (ths[h].getAttribute('aria-sort') !== aria) ths[h].setAttribute('aria-sort', aria);
    }

    var sig = [JSON.stringify(state.sort), state.filter, state.selectedId, allow, d.paramNames.length, d.tableSig].join('|');
    if (sig === tableSig) return;
    tableSig = sig;

    var filter = state.filter;
    var rows = filter === 'all' ? d.rows.slice() : d.rows.filter(function (r) { return r.status === filter; });
    var key = state.sort.key;
    var dir = state.sort.dir;
    var keyed = rows.map(function (r) { return { r: r, v: sortValue(r, key) }; });
    keyed.sort(function (a, b) {
      var an = a.v === null || a.v === undefined;
      var bn = b.v === null || b.v === undefined;
      var c = 0;
      if (an && bn) c = 0;
      else if (an) return 1;
      else if (bn) return -1;
      else c = dir * compareValues(a.v, b.v);
      if (c !== 0) return c;
      var sa = a.r.seq === null ? Infinity : a.r.seq;
      var sb = b.r.seq === null ? Infinity : b.r.seq;
      return sa - sb || 0;
    });
    var total = keyed.length;
    var shown = Math.min(total, ROW_CAP);
    var items = new Array(shown);
    for (var i = 0; i < shown; i++) {
      var r = keyed[i].r;
      var id = escapeHtml(r.id);
      var cells = '<td class="num">' + (r.seq === null ? '' : escapeHtml(r.seq)) + '</td>' +
        '<td class="mono" title="' + id + '">' + id + '</td>' +
        '<td><span class="st st-' + safeClass(r.status) + '">' + escapeHtml(r.status) + '</span></td>' +
        '<td class="num' + (r.metric === null ? ' null' : '') + '">' + escapeHtml(fmtNum(r.metric)) + '</td>' +
        '<td class="num">' + (r.duration === null ? '' : escapeHtml(fmtSeconds(r.duration))) + '</td>' +
        '<td class="num">' + (r.attempt === null ? '' : escapeHtml(r.attempt)) + '</td>' +
        '<td>' + (r.worker === null ? '' : escapeHtml(r.worker)) + '</td>';
      for (var p = 0; p < r.pt.length; p++) {
        var t = r.pt[p];
        if (t === null) {
          cells += '<td class="null"></td>';
        } else {
          var et = escapeHtml(t);
          if (isNum(r.pv[p])) cells += '<td class="num" title="' + et + '">' + escapeHtml(fmtNum(r.pv[p])) + '</td>';
          else cells += '<td title="' + et + '">' + et + '</td>';
        }
      }
      var act = '';
      if (allow && (r.status === 'RUNNING' || r.status === 'WAITING')) {
        act = '<button type="button" class="kill" data-trial-id="' + id + '">kill</button>';
      }
      cells += '<td>' + act + '</td>';
      items[i] = {
        id: r.id,
        html: '<tr data-trial-id="' + id + '" data-status="' + escapeHtml(r.status) + '"' +
          (state.selectedId !== null && r.id === state.selectedId ? ' class="selected"' : '') + '>' + cells + '</tr>'
      };
    }
    updateRows(tbody, items);
    var plural = function (n) { return n + (n === 1 ? ' trial' : ' trials'); };
    var note = total > shown ? 'showing first ' + shown + ' of ' + total :
      filter === 'all' ? plural(total) : total + ' of ' + plural(d.rows.length);
    setText('trials-note', note);
  }

  // Keyed update of the table body: rows whose HTML did not change keep their
  // element (no flicker, no lost clicks, element references stay valid);
  // changed or new rows are parsed in one go; then the order is fixed with
  // the fewest moves.
  var rowCache = new Map();

  function updateRows(tbody, items) {
    var els = new Array(items.length);
    var next = new Map();
    var toParse = [];
    items.forEach(function (it, i) {
      var c = rowCache.get(it.id);
      if (c && c.html === it.html && !next.has(it.id)) {
        els[i] = c.el;
        next.set(it.id, c);
      } else {
        toParse.push(i);
      }
    });
    if (toParse.length) {
      var tpl = document.createElement('tbody');
      tpl.innerHTML = toParse.map(function (i) { return items[i].html; }).join('');
      var parsed = Array.prototype.slice.call(tpl.children);
      toParse.forEach(function (i, k) {
        var el = parsed[k] || document.createElement('tr');
        els[i] = el;
        if (!next.has(items[i].id)) next.set(items[i].id, { html: items[i].html, el: el });
      });
    }
    var kids = tbody.children;
    for (var j = 0; j < els.length; j++) {
      var cur = kids[j];
      if (cur !== els[j]) tbody.insertBefore(els[j], cur || null);
    }
    while (kids.length > els.length) tbody.removeChild(tbody.lastElementChild);
    rowCache = next;
  }

  // ---------------------------------------------------------------- detail

  function renderDetail(d) {
    var empty = $('detail-empty');
    var body = $('detail-body');
    var id = state.selectedId;
    var r = id === null ? null : d.rowById.get(id);
    if (!r) {
      if (body) body.hidden = true;
      if (empty) {
        empty.hidden = false;
        empty.textContent = id === null ? 'Click a row of the trial table to see its details.' :
          'Trial ' + id + ' is not in the trial list.';
      }
      detailSig = '';
      return;
    }
    var dir = state.session && state.session.experiment_dir ? str(state.session.experiment_dir) : '';
    var sig = [state.trialsVersion, state.metricsVersion, id, dir].join('|');
    if (empty) empty.hidden = true;
    if (body) body.hidden = false;
    if (sig === detailSig) return;
    detailSig = sig;
    var t = r.t;
    setText('detail-trial-id', r.id);
    setText('detail-sequence', r.seq === null ? '—' : '#' + r.seq);
    setText('detail-status', r.status);
    setText('detail-source', str(t.source) || '—');
    setText('detail-attempt', r.attempt === null ? '—' : r.attempt);
    setText('detail-worker', r.worker || '—');
    setText('detail-start', fmtTime(t.start_time));
    setText('detail-end', fmtTime(t.end_time));
    setText('detail-duration', r.duration === null ? '—' : fmtDuration(r.duration) + ' (' + fmtSeconds(r.duration) + ' s)');
    var fin = t.final;
    var finText = fmtNum(r.metric);
    if (fin && typeof fin === 'object') {
      try { finText += '   ' + JSON.stringify(fin); } catch (e) { /* ignore */ }
    }
    setText('detail-final', finText);
    var ptxt = '';
    try { ptxt = JSON.stringify(paramsOf(t), null, 2); } catch (e) { ptxt = String(t.parameters); }
    setText('trial-params', ptxt);
    setText('trial-error', str(t.error));
    var eh = $('trial-error-head');
    if (eh) eh.hidden = !str(t.error);
    var logRow = $('trial-log-row');
    if (logRow) logRow.hidden = !dir;
    setText('trial-log', dir ? dir + '/trials/' + r.id : '');

    var curve = d.curves.get(r.id) || [];
    var cnote = $('trial-curve-note');
    if (cnote) {
      cnote.hidden = curve.length > 0;
      cnote.textContent = curve.length ? '' : 'no intermediate results';
    }
    if (!chartLib()) return;
    var data = curve.map(function (p) { return { x: p.x, y: p.y }; });
    setChart('chart-trial', JSON.stringify([r.id, data]), function () {
      return {
        type: 'line',
        data: {
          datasets: [{
            label: 'trial ' + r.id,
            data: data,
            borderColor: 'rgba(37,99,235,0.9)',
            backgroundColor: 'rgba(37,99,235,0.9)',
            borderWidth: 1.6,
            pointRadius: data.length > 200 ? 0 : 2.5,
            fill: false,
            tension: 0
          }]
        },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { type: 'linear', title: axisTitle('report sequence') },
            y: { type: 'linear', title: axisTitle('metric') }
          },
          plugins: { legend: { display: false } }
        }
      };
    });
  }

  function selectTrial(id) {
    state.selectedId = id === null || id === undefined ? null : String(id);
    if (!state.trials) return;
    try {
      var d = getDerived();
      renderTable(d);
      renderDetail(d);
    } catch (e) {
      notice(errText(e), 'error');
    }
  }

  // ---------------------------------------------------------------- render

  function renderAll() {
    renderHeader();
    if (!state.status || !state.trials) return false;
    var d = getDerived();
    var firstErr = null;
    [renderOverview, function () { renderControls(); }, renderTable, renderDetail, renderCharts].forEach(function (fn) {
      try { fn(d); } catch (e) { if (!firstErr) firstErr = e; }
    });
    window.tunehostRenders = (typeof window.tunehostRenders === 'number' ? window.tunehostRenders : 0) + 1;
    if (document.body && document.body.dataset.loaded !== '1') document.body.dataset.loaded = '1';
    state.everRendered = true;
    if (firstErr) notice(errText(firstErr), 'error', 'transient');
    return true;
  }

  // ---------------------------------------------------------------- polling

  function schedule(ms) {
    if (state.timer !== null) clearTimeout(state.timer);
    state.timer = setTimeout(function () { state.timer = null; tick(); }, ms);
  }

  function refreshSoon() {
    state.finalRefreshDone = false;
    if (state.ticking) { state.pendingTick = true; return; }
    schedule(0);
  }

  async function tick() {
    if (state.report) return;
    if (state.ticking) { state.pendingTick = true; return; }
    state.ticking = true;
    var delay = POLL_MS;
    try {
      if (!state.session) {
        try {
          var s = await api('api/session');
          if (s.body && typeof s.body === 'object') state.session = s.body;
        } catch (e) {
          if (e && (e.kind === 'auth' || e.kind === 'net')) throw e;
          // Other session errors: carry on as a viewer, retry next time.
        }
      }
      var st = await api('api/status');
      if (!st.body || typeof st.body !== 'object') throw mkErr('http', 'error: unreadable status reply');
      state.status = st.body;
      var fin = FINISHED.has(str(st.body.status));
      if (!fin) state.finalRefreshDone = false;
      if (!fin || !state.finalRefreshDone || !state.trials) {
        var replies = await Promise.all([api('api/trials'), api('api/metrics')]);
        setTrials(replies[0].body, replies[0].text);
        setMetrics(replies[1].body, replies[1].text);
        if (fin) state.finalRefreshDone = true;
      }
      clearNotice('transient');
      renderAll();
      if (fin && state.finalRefreshDone) delay = SLOW_POLL_MS;
    } catch (e) {
      notice(errText(e), 'error', 'transient');
      try { renderHeader(); } catch (e2) { /* ignore */ }
    } finally {
      state.ticking = false;
      if (state.pendingTick) {
        state.pendingTick = false;
        schedule(0);
      } else {
        schedule(delay);
      }
    }
  }

  // ---------------------------------------------------------------- events

  function bindEvents() {
    var table = $('trials');
    if (table) {
      var thead = table.tHead || table.createTHead();
      var tbody = table.tBodies[0] || table.createTBody();
      thead.addEventListener('click', function (ev) {
        var th = ev.target && ev.target.closest ? ev.target.closest('th[data-key]') : null;
        if (!th || th.classList.contains('nosort')) return;
        var key = th.getAttribute('data-key');
        if (state.sort.key === key) state.sort = { key: key, dir: -state.sort.dir };
        else state.sort = { key: key, dir: 1 };
        if (state.trials) {
          try { renderTable(getDerived()); } catch (e) { notice(errText(e), 'error'); }
        }
      });
      tbody.addEventListener('click', function (ev) {
        var target = ev.target;
        if (!target || !target.closest) return;
        var btn = target.closest('button.kill');
        if (btn) {
          ev.stopPropagation();
          killTrial(btn.getAttribute('data-trial-id'), btn);
          return;
        }
        var tr = target.closest('tr[data-trial-id]');
        if (tr) selectTrial(tr.getAttribute('data-trial-id'));
      });
    }
    var sel = $('status-filter');
    if (sel) {
      sel.addEventListener('change', function () {
        state.filter = sel.value || 'all';
        if (state.trials) {
          try { renderTable(getDerived()); } catch (e) { notice(errText(e), 'error'); }
        }
      });
    }
    var apply = $('apply-limits');
    if (apply) apply.addEventListener('click', function () { applyLimits(); });
    LIMIT_FIELDS.forEach(function (f) {
      var el = $(f.id);
      if (el) {
        el.addEventListener('keydown', function (ev) {
          if (ev.key === 'Enter') applyLimits();
        });
      }
    });
    var resizeTimer = null;
    window.addEventListener('resize', function () {
      if (resizeTimer !== null) clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        resizeTimer = null;
        if (!state.trials) return;
        try { renderParallel(getDerived(), false); } catch (e) { /* ignore */ }
      }, 150);
    });
  }

  // ---------------------------------------------------------------- start

  function startReport(rep) {
    state.report = true;
    var sess = rep.session && typeof rep.session === 'object' ? rep.session : {};
    state.session = Object.assign({}, sess, { role: 'report', live: false, read_only: true });
    state.status = rep.status && typeof rep.status === 'object' ? rep.status : { status: 'VIEWED', counts: {} };
    setTrials(rep.trials, null);
    setMetrics(rep.metrics, null);
    try {
      renderAll();
    } catch (e) {
      notice(errText(e), 'error');
    }
  }

  function start() {
    try {
      bindEvents();
      var sel = $('status-filter');
      if (sel) state.filter = sel.value || 'all';
      var rep = window.TUNEHOST_REPORT;
      if (rep && typeof rep === 'object') {
        startReport(rep);
      } else {
        notice('loading…', 'info', 'transient');
        tick();
      }
    } catch (e) {
      notice(errText(e), 'error');
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
