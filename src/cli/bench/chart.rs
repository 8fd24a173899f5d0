//! A plain SVG bar chart of Mpps per (app, trace): no plotting dependency needed.

use std::path::Path;

use super::steve::Row;

pub fn bars(path: &Path, title: &str, rows: &[Row]) -> anyhow::Result<()> {
    let mut traces: Vec<&str> = Vec::new();
    let mut apps: Vec<&str> = Vec::new();
    for r in rows {
        if !traces.contains(&r.trace.as_str()) {
            traces.push(&r.trace);
        }
        if !apps.contains(&r.app.as_str()) {
            apps.push(&r.app);
        }
    }
    let max = rows.iter().map(|r| r.mpps).fold(1.0, f64::max);
    let (bw, gap, h, top, left) = (18.0, 30.0, 300.0, 40.0, 50.0);
    let group = bw * apps.len() as f64 + gap;
    let width = left + group * traces.len() as f64 + 160.0;
    let colors = [
        "#888", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{}' font-family='sans-serif' font-size='11'>\n<text x='{left}' y='20' font-size='14'>{title}</text>\n",
        h + top + 60.0
    );
    for (ti, t) in traces.iter().enumerate() {
        let x0 = left + ti as f64 * group;
        for (ai, a) in apps.iter().enumerate() {
            let Some(r) = rows.iter().find(|r| r.trace == *t && r.app == *a) else {
                continue;
            };
            let bh = r.mpps / max * h;
            let x = x0 + ai as f64 * bw;
            s += &format!(
                "<rect x='{x:.1}' y='{:.1}' width='{:.1}' height='{bh:.1}' fill='{}'><title>{a} on {t}: {:.2} Mpps</title></rect>\n",
                top + h - bh,
                bw - 2.0,
                colors[ai % colors.len()],
                r.mpps
            );
            s += &format!(
                "<text x='{:.1}' y='{:.1}' font-size='9' text-anchor='middle'>{:.1}</text>\n",
                x + bw / 2.0,
                top + h - bh - 3.0,
                r.mpps
            );
        }
        s += &format!("<text x='{:.1}' y='{:.1}'>{t}</text>\n", x0, top + h + 18.0);
    }
    for (ai, a) in apps.iter().enumerate() {
        let y = top + 14.0 * ai as f64;
        let x = left + group * traces.len() as f64 + 10.0;
        s += &format!(
            "<rect x='{x}' y='{y}' width='10' height='10' fill='{}'/><text x='{}' y='{}'>{a}</text>\n",
            colors[ai % colors.len()],
            x + 14.0,
            y + 9.0
        );
    }
    s += &format!(
        "<line x1='{left}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n</svg>\n",
        top + h,
        width - 160.0,
        top + h
    );
    std::fs::write(path, s).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
