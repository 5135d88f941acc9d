//! Line charts as SVG polylines (pure, tested natively): the equity curve of a trading node and
//! its buy-and-hold benchmark share one value axis.

/// Scales several series into a `width × height` box (with a margin) on a common value range and
/// returns each as an SVG `points` string, plus the (min, max) of the axis.
pub fn polylines(series: &[&[f64]], width: f64, height: f64, margin: f64) -> (Vec<String>, (f64, f64)) {
    let all = series.iter().flat_map(|s| s.iter().copied()).filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (series.iter().map(|_| String::new()).collect(), (0.0, 0.0));
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let lines = series
        .iter()
        .map(|s| {
            let n = s.len().max(2) - 1;
            s.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| {
                    let x = margin + (width - 2.0 * margin) * i as f64 / n as f64;
                    let y = height - margin - (height - 2.0 * margin) * (v - lo) / span;
                    format!("{x:.1},{y:.1}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    (lines, (lo, hi))
}

/// A percentage with one decimal (`0.0123` → `1.2%`).
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_share_one_axis() {
        let a = [100.0, 110.0, 105.0];
        let b = [100.0, 90.0];
        let (lines, (lo, hi)) = polylines(&[&a, &b], 200.0, 100.0, 10.0);
        assert_eq!((lo, hi), (90.0, 110.0));
        assert_eq!(lines[0], "10.0,50.0 100.0,10.0 190.0,30.0");
        assert_eq!(lines[1], "10.0,50.0 190.0,90.0");
        let (empty, _) = polylines(&[&[]], 10.0, 10.0, 1.0);
        assert_eq!(empty, vec![String::new()]);
        assert_eq!(pct(Some(0.0123)), "1.2%");
        assert_eq!(pct(None), "–");
    }
}
