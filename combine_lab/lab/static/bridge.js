// The stacked segment map (more PEs than its panels) is one image of pes * epp rows x pes columns, too many
// cells for a <title> each: the image carries the plan's segments (data-* attributes, combine_lab/lab/segments.py
// segment_cells_data) and the pointer's cell gets segment_text's sentence, written here the same way.
const cellData = new WeakMap();  // image -> its decoded segments (decoded once per drawing)

function decodeCells(img) {
  const src = img.getAttribute('data-rows');
  const got = cellData.get(img);
  if (got && got.src === src) return got;
  const bytes = (b64) => {
    const t = atob(b64), out = new Uint8Array(t.length);
    for (let i = 0; i < t.length; i++) out[i] = t.charCodeAt(i);
    return out;
  };
  const a = (n) => Number(img.getAttribute('data-' + n));
  const raw = bytes(src), per = a('rows-bits') / 8;
  // little-endian counts: a typed array over them where this machine is little-endian too, else read one by one
  const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  let rows;
  if (per === 1) rows = raw;
  else if (littleEndian) rows = per === 2 ? new Uint16Array(raw.buffer) : new Uint32Array(raw.buffer);
  else {
    const view = new DataView(raw.buffer);
    rows = new Uint32Array(raw.length / per);
    for (let i = 0; i < rows.length; i++) {
      rows[i] = per === 2 ? view.getUint16(2 * i, true) : view.getUint32(4 * i, true);
    }
  }
  const pes = a('pes'), epp = a('epp');
  // the rule's numerator per PE: the rows of its remote segments (src_rank != pe) times the row bytes
  const remote = new Float64Array(pes);
  for (let d = 0; d < pes; d++) {
    for (let le = 0; le < epp; le++) {
      for (let s = 0; s < pes; s++) if (s !== d) remote[d] += rows[(d * epp + le) * pes + s];
    }
  }
  const out = { src, pes, epp, rows, remote, sdma: bytes(img.getAttribute('data-sdma')),
    variant: img.getAttribute('data-variant'), floor: BigInt(img.getAttribute('data-floor')),
    rowBytes: BigInt(img.getAttribute('data-row-bytes')) };
  cellData.set(img, out);
  return out;
}

// 1234567 -> "1,234,567", as Python's f"{n:,}" (BigInt: exact at any size)
const commas = (n) => n.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');

function cellText(c, d, le, s) {
  const i = (d * c.epp + le) * c.pes + s;
  const r = c.rows[i], b = BigInt(r) * c.rowBytes;
  const num = BigInt(c.remote[d]) * c.rowBytes, den = BigInt(Math.max(c.pes - 1, 1) * c.epp);
  const plane = (c.sdma[i >> 3] >> (7 - (i & 7))) & 1 ? 'SDMA' : 'MTE';
  let why;
  if (c.variant !== 'doubleplane') why = 'classic sends every segment by MTE';
  else if (s === d) why = "the PE's own segment (local): always MTE";
  else if (r === 0) why = 'empty: nothing to send';
  else if (b < c.floor) why = `below the floor (${commas(b)} B < ${commas(c.floor)} B)`;
  else if (!(b * den > num)) {
    why = `at or below PE ${d}'s average remote segment (${commas(b)} B * ${den} <= ${commas(num)})`;
  }
  else {
    why = `at or above the floor (${commas(b)} B >= ${commas(c.floor)} B) and above PE ${d}'s average remote ` +
      `segment (${commas(b)} B * ${den} > ${commas(num)})`;
  }
  return `PE ${d} sends ${commas(r)} row${r !== 1 ? 's' : ''} (${commas(b)} B) of local_expert ${le} ` +
    `back to src_rank ${s} by ${plane}: ${why} (docs/decision-rule.md#1-the-rule)`;
}

function cellHover(root, observers) {
  const tip = document.createElement('div');
  tip.className = 'cl-cell-tip';
  tip.setAttribute('role', 'tooltip');
  // styled here: the tooltip is the bridge's own element (fixed, so no box of the app clips or scrolls it)
  Object.assign(tip.style, { position: 'fixed', display: 'none', zIndex: 1000, maxWidth: '420px',
    padding: '4px 7px', background: '#fffff0', color: '#111', border: '1px solid #777', borderRadius: '3px',
    font: '12px/1.35 sans-serif', pointerEvents: 'none', boxShadow: '0 1px 4px rgba(0,0,0,.25)' });
  document.body.appendChild(tip);
  let shown = null;  // the image whose cell the tooltip says
  const hide = () => { tip.style.display = 'none'; tip.removeAttribute('data-cell'); shown = null; };
  // a replan draws a new map under a still pointer: the old map's sentence goes with it
  const mo = new MutationObserver(() => { if (shown && !shown.isConnected) hide(); });
  mo.observe(root, { subtree: true, childList: true }); observers.push(mo);
  // on the app, not on the image: the map is redrawn (a new image) at every replan, and the white lines
  // between PEs drawn over the image would take the pointer's events from it
  root.addEventListener('pointermove', (e) => {
    const map = e.target.closest && e.target.closest('svg.cl-segment-map');
    const img = map && map.querySelector('image.cl-cells[data-rows]');
    if (!img) { hide(); return; }
    const box = img.getBoundingClientRect();
    const fx = (e.clientX - box.left) / box.width, fy = (e.clientY - box.top) / box.height;
    if (!(fx >= 0 && fx < 1 && fy >= 0 && fy < 1)) { hide(); return; }
    const c = decodeCells(img);
    const s = Math.floor(fx * c.pes), row = Math.floor(fy * c.pes * c.epp);
    const d = Math.floor(row / c.epp), le = row % c.epp, cell = `${d} ${le} ${s}`;
    if (shown !== img || tip.getAttribute('data-cell') !== cell) {
      shown = img;
      tip.textContent = cellText(c, d, le, s);
      tip.setAttribute('data-cell', cell);
    }
    tip.style.display = 'block';
    // beside the pointer, kept inside the window
    const w = tip.offsetWidth, h = tip.offsetHeight;
    const x = e.clientX + 14 + w > window.innerWidth ? e.clientX - 14 - w : e.clientX + 14;
    const y = e.clientY + 16 + h > window.innerHeight ? e.clientY - 10 - h : e.clientY + 16;
    tip.style.left = Math.max(0, x) + 'px'; tip.style.top = Math.max(0, y) + 'px';
  });
  root.addEventListener('pointerleave', hide);
  return tip;
}

function render({ model, el }) {
  el.classList.add('cl-bridge');
  let root = null, tip = null, timers = [], observers = [], lastPong = Date.now(), banner = null, wasFocused = false;
  const key = model.get('key');
  function setup() {
    root = el.closest('.cl-app');
    if (!root) return false;
    // JupyterLab's notebook shortcuts (arrows, A, B, D D ...) must not act on keys pressed in the app
    root.setAttribute('data-lm-suppress-shortcuts', 'true');
    // and the notebook's own keydown handling (JupyterLab 4.6 moves the active cell on ArrowDown even in a
    // <select>): keys pressed in the app stay in the app, their default actions kept; Escape and
    // Shift/Ctrl+Enter still reach the notebook (leave the app, run the cell)
    root.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' || (e.key === 'Enter' && (e.shiftKey || e.ctrlKey || e.metaKey || e.altKey))) return;
      e.stopPropagation();
    });
    // the width the figures have: they are drawn to fill it
    const ro = new ResizeObserver(() => {
      const w = Math.round(root.clientWidth);
      if (w > 0 && Math.abs(w - model.get('width')) > 8) { model.set('width', w); model.save_changes(); }
    });
    ro.observe(root); observers.push(ro);
    // after a Run the button comes back enabled: give it the focus it lost when it was disabled
    const watch = () => {
      const b = root.querySelector('.cl-run');
      if (!b) return;
      const mo = new MutationObserver(() => {
        if (b.disabled) { wasFocused = wasFocused || document.activeElement === b || document.activeElement === document.body; }
        else if (wasFocused) {
          wasFocused = false;
          const a = document.activeElement;
          if (!a || a === document.body || a === b) b.focus();
        }
      });
      mo.observe(b, { attributes: true, attributeFilter: ['disabled'] }); observers.push(mo);
      b.addEventListener('mousedown', () => { wasFocused = true; });
      b.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') wasFocused = true; });
    };
    watch();
    // each control's tooltip and, while it is marked, its reasons at the control (data-reason, drawn by the
    // CSS): ipywidgets 8 puts no tooltip of a described control in the page. The kernel sends them as
    // 'tips' (name -> [tooltip, reasons]); marks and tips may come in either order, so both are watched.
    const tips = () => {
      let t = {};
      try { t = JSON.parse(model.get('tips') || '{}'); } catch (e) { return; }
      for (const [name, [tip, why]] of Object.entries(t)) {
        const c = root.querySelector('.cl-control-' + name);
        if (!c) continue;
        const text = why || tip || '';
        for (const e of [c, c.querySelector('.widget-label')]) {
          if (!e) continue;
          if (text && e.getAttribute('title') !== text) e.setAttribute('title', text);
          else if (!text && e.hasAttribute('title')) e.removeAttribute('title');
        }
        const want = c.classList.contains('cl-bad') ? (why || '') : '';
        if ((c.getAttribute('data-reason') || '') !== want) {
          if (want) c.setAttribute('data-reason', want); else c.removeAttribute('data-reason');
        }
      }
    };
    // and every other widget's label without a tooltip says "null" on hover: no title there instead
    const nulls = () => root.querySelectorAll('[title="null"]').forEach((e) => e.removeAttribute('title'));
    tips(); nulls();
    model.on('change:tips', tips);
    const to = new MutationObserver(() => { tips(); nulls(); });
    to.observe(root, { subtree: true, attributes: true, attributeFilter: ['class', 'title'], childList: true });
    observers.push(to);
    // the arrow keys step a number box by its step (h: by H_STEP, as its tooltip says), like <input type=number>
    root.addEventListener('keydown', (e) => {
      if (e.key !== 'ArrowUp' && e.key !== 'ArrowDown') return;
      const box = e.target.closest && e.target.closest('.cl-number');
      if (!box || e.target.tagName !== 'INPUT') return;
      const step = Number(box.getAttribute('data-step') || (box.className.match(/cl-step-(\d+)/) || [])[1] || 0);
      const v = Number(e.target.value.trim());
      if (!step || !Number.isInteger(v)) return;
      e.preventDefault();
      e.target.value = String(v + (e.key === 'ArrowUp' ? step : -step));
      e.target.dispatchEvent(new Event('change', { bubbles: true }));
    }, true);  // capture: the text box's own keydown handler stops the event from bubbling
    tip = cellHover(root, observers);
    return true;
  }
  if (!setup()) { const t = setInterval(() => { if (setup()) clearInterval(t); }, 100); timers.push(t); }
  // settings and history kept in this tab across a reload
  if (key) {
    try {
      const saved = window.sessionStorage.getItem(key);
      if (saved) { model.set('restore', saved); model.save_changes(); }
    } catch (e) { /* storage off: nothing kept */ }
    model.on('change:stored', () => {
      try { window.sessionStorage.setItem(key, model.get('stored')); } catch (e) { }
    });
  }
  // a kernel that stops answering is said on the page, with a reload
  // the kernel's heartbeat (a thread of its own, once a second) or its answer to a ping: it is alive
  model.on('msg:custom', (msg) => {
    if (msg && (msg.pong !== undefined || msg.alive !== undefined)) {
      lastPong = Date.now();
      if (banner) { banner.remove(); banner = null; if (root) root.removeAttribute('inert'); }
    }
  });
  const silent = model.get('silent_s') * 1000;
  let lastPing = 0;
  timers.push(setInterval(() => {
    if (Date.now() - lastPing > 2000) { lastPing = Date.now(); try { model.send({ ping: lastPing }); } catch (e) { } }
    if (Date.now() - lastPong > silent && !banner && root) {
      banner = document.createElement('div');
      banner.className = 'cl-dead-banner';
      banner.setAttribute('role', 'alert');
      banner.textContent = "The app's kernel has not answered for " + Math.round((Date.now() - lastPong) / 1000) +
        " s: it has stopped (or is stuck), so the controls are off. Reload the page for a new one. ";
      const b = document.createElement('button');
      b.textContent = 'Reload the page'; b.className = 'cl-reload';
      b.onclick = () => window.location.reload();
      banner.appendChild(b);
      // outside the app, which takes no input meanwhile (a value typed there would go nowhere)
      root.parentNode.insertBefore(banner, root);
      root.setAttribute('inert', '');
    }
  }, 500));
  return () => { timers.forEach(clearInterval); observers.forEach((o) => o.disconnect()); if (banner) banner.remove(); if (tip) tip.remove(); };
}
export default { render };
