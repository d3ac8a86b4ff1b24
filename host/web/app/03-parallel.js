  // app.js part 03: parallel coordinates (drawn by hand on a canvas) and renderCharts.
  // The parts are one function body, joined in order by the build (host/CMakeLists.txt).

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

