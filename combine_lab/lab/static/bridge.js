function render({ model, el }) {
  el.classList.add('cl-bridge');
  let root = null, timers = [], observers = [], lastPong = Date.now(), banner = null, wasFocused = false;
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
  return () => { timers.forEach(clearInterval); observers.forEach((o) => o.disconnect()); if (banner) banner.remove(); };
}
export default { render };
