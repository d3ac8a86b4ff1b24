  // app.js part 02: the Chart.js charts: history, intermediate results, durations, importance, slices, 2-parameter map.
  // The parts are one function body, joined in order by the build (host/CMakeLists.txt).

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

  // Several objectives: the succeeded trials on the first two objectives,
  // the front's members, the other feasible trials and the infeasible ones (a
  // constraint above 0 or missing) apart. Click a point to open its trial.
  function renderParetoChart(st, d, front, objs) {
    var box = $('pareto-chart-box');
    if (!box) return;
    var show = objs.length >= 2 && !!chartLib();
    box.hidden = !show;
    if (!show) {
      destroyChart('chart-pareto');
      return;
    }
    var ox = objs[0];
    var oy = objs[1];
    var cons = Array.isArray(st.constraints) ?
      st.constraints.filter(function (c) { return typeof c === 'string'; }) : [];
    var onFront = new Set(front.map(function (t) { return t && typeof t === 'object' ? str(t.trial_id) : ''; }));
    var sets = [[], [], []];  // front, other feasible, infeasible
    d.succeeded.forEach(function (r) {
      var x = objectiveValue(r.t.final, ox.key);
      var y = objectiveValue(r.t.final, oy.key);
      if (x === null || y === null) return;
      var p = { x: x, y: y, trial: r.id };
      var infeasible = cons.some(function (c) {
        var v = objectiveValue(r.t.final, c);
        return v === null || v > 0;
      });
      sets[onFront.has(r.id) ? 0 : infeasible ? 2 : 1].push(p);
    });
    var sig = JSON.stringify([ox, oy, sets]);
    var dir = function (o) { return o.key + (o.maximize ? ' (maximize)' : ' (minimize)'); };
    setChart('chart-pareto', sig, function () {
      var style = [['Pareto front', 'rgba(234,88,12,0.95)', 4.5], ['other feasible trials', 'rgba(37,99,235,0.55)', 3],
        ['infeasible trials', 'rgba(148,163,184,0.7)', 3]];
      return {
        type: 'scatter',
        data: {
          datasets: sets.map(function (pts, i) {
            return { label: style[i][0], data: pts, backgroundColor: style[i][1], borderColor: style[i][1],
              pointRadius: style[i][2] };
          })
        },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { type: 'linear', title: axisTitle(dir(ox)) },
            y: { type: 'linear', title: axisTitle(dir(oy)) }
          },
          plugins: {
            legend: { display: true },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var raw = ctx.raw || {};
                  return 'trial ' + str(raw.trial) + ': ' + fmtNum(raw.x) + ', ' + fmtNum(raw.y);
                }
              }
            }
          },
          onClick: function (evt, els) {
            if (!els || !els.length) return;
            var ch = window.tunehostCharts['chart-pareto'];
            var ds = ch && ch.data.datasets[els[0].datasetIndex];
            var raw = ds && ds.data[els[0].index];
            if (raw && raw.trial != null) selectTrial(raw.trial);
          }
        }
      };
    });
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
    // With several objectives no one value is "best so far" (the Pareto
    // front's card shows the trade-off): the line is left out.
    var multi = !!namedObjectives(state.status);
    var best = null;
    var bestLine = multi ? [] : pts.map(function (p) {
      best = best === null ? p.y : d.maximize ? Math.max(best, p.y) : Math.min(best, p.y);
      return { x: p.x, y: best };
    });
    var sig = JSON.stringify([d.maximize, multi, pts]);
    setChart('chart-history', sig, function () {
      var cfg = {
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
      if (multi) cfg.data.datasets.pop();
      return cfg;
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
