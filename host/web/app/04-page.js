  // app.js part 04: overview, controls, trial table and detail, rendering, polling, events and start.
  // The parts are one function body, joined in order by the build (host/CMakeLists.txt).

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
      // A report has its own badge (#report-badge) instead of a role.
      rb.hidden = !!state.report;
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
    var objs = namedObjectives(st);
    setText('ov-mode-label', objs ? 'Objectives' : 'Optimize mode');
    setText('ov-mode', objs ? objs.map(function (o) {
      return o.key + ' (' + (o.maximize ? 'maximize' : 'minimize') + ')';
    }).join(', ') : optimizeMode());
    setText('ov-best-label', objs ? 'Pareto front' : 'Best trial');
    var b = st.best;
    if (objs) {
      var n = isNum(st.pareto_front_size) ? st.pareto_front_size :
        Array.isArray(st.pareto_front) ? st.pareto_front.length : 0;
      setText('ov-best', n + ' trial(s): see the Pareto front below');
    } else if (b && typeof b === 'object') {
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
    renderPareto(st, d);
  }

  // Several objectives: the status's pareto_front, objectives and
  // constraints (wire-format.md §4.2, ST), nil when the tuner names none.
  function renderPareto(st, d) {
    var sec = $('pareto');
    if (!sec) return;
    var front = Array.isArray(st.pareto_front) ? st.pareto_front : null;
    var objs = namedObjectives(st) || [];
    sec.hidden = !front;
    if (!front) return;
    var size = isNum(st.pareto_front_size) && st.pareto_front_size > front.length ?
      st.pareto_front_size : front.length;
    setText('pareto-count', size + ' trial(s): succeeded, every constraint met, ' +
      'none dominated by another' + (size > front.length ? ' (the first ' + front.length + ' listed)' : ''));
    var head = '<tr><th>Trial</th><th>#</th>' + objs.map(function (o) {
      return '<th>' + escapeHtml(o.key) + (o.maximize ? ' ↑' : ' ↓') + '</th>';
    }).join('') + '<th>Final result</th></tr>';
    var thead = sec.querySelector('thead');
    if (thead && thead.innerHTML !== head) thead.innerHTML = head;
    var html = front.map(function (t) {
      t = t && typeof t === 'object' ? t : {};
      return '<tr data-trial-id="' + escapeHtml(str(t.trial_id)) + '"><td>' + escapeHtml(str(t.trial_id)) +
        '</td><td>' + escapeHtml(isNum(t.sequence_id) ? t.sequence_id : '?') + '</td>' +
        objs.map(function (o) {
          var v = objectiveValue(t.result, o.key);
          return '<td class="num">' + escapeHtml(v === null ? '—' : fmtNum(v)) + '</td>';
        }).join('') + '<td><code>' +
        escapeHtml(JSON.stringify(t.result === undefined ? null : t.result)) + '</code></td></tr>';
    }).join('');
    var body = sec.querySelector('tbody');
    if (body && body.innerHTML !== html) body.innerHTML = html;
    renderParetoChart(st, d, front, objs);
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
