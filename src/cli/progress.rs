//! Progress on stderr: an indicatif spinner when stderr is a terminal, silence
//! otherwise (structured logs stay available through `SOKOSHARD_LOG`).

use indicatif::{ProgressBar, ProgressStyle};
use sokoshard::engine::kpg::{KStats, KpgProgress};
use sokoshard::engine::search::{LayerEvent, ProbeEvent, Progress};
use sokoshard::sys::{human_bytes, rss_bytes};
use std::io::IsTerminal;
use std::time::Duration;

pub struct LayerProgress {
    bar: Option<ProgressBar>,
    label: String,
}

impl LayerProgress {
    pub fn new(label: String) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template("{spinner} {prefix} {wide_msg}").expect("static template"));
            b.set_prefix(label.clone());
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        LayerProgress { bar, label }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for LayerProgress {
    fn layer_done(&self, e: &LayerEvent) {
        let rate = if e.seconds > 0.0 { e.stored as f64 / e.seconds } else { 0.0 };
        tracing::debug!(level = %self.label, bound = e.bound, side = e.side.name(), layer = e.layer, new = e.new_states,
            stored = e.stored, seconds = e.seconds, "layer done");
        if let Some(b) = &self.bar {
            let bound = e.bound.map(|u| format!("bound {u} | ")).unwrap_or_default();
            let (pass, of) = match e.moves_budget {
                Some(budget) => ("moves pass | ", format!(" of {budget}")),
                None => ("", String::new()),
            };
            b.set_message(format!(
                "{pass}{bound}{} layer {} | frontier fwd {} bwd {} | stored {}{of} | {:.0} states/s | mem {} (store {})",
                e.side.name(),
                e.layer,
                e.frontiers[0],
                e.frontiers[1],
                e.stored,
                rate,
                human_bytes(rss_bytes()),
                human_bytes(e.memory_bytes)
            ));
        }
    }

    fn probe_step(&self, e: &ProbeEvent) {
        let rate = if e.seconds > 0.0 { e.generated as f64 / e.seconds } else { 0.0 };
        tracing::debug!(level = %self.label, bound = e.bound, depth = e.depth, stored = e.stored, "probe step");
        if let Some(b) = &self.bar {
            let bound = e.bound.map(|u| format!("bound {u} | ")).unwrap_or_default();
            b.set_message(format!(
                "{bound}probe depth {} | stored {} | {:.0} generated/s | mem {}",
                e.depth,
                e.stored,
                rate,
                human_bytes(rss_bytes())
            ));
        }
    }
}

/// Per-k progress: a spinner on a terminal, with the layer line underneath.
pub struct KProgress {
    layers: LayerProgress,
    bar: Option<ProgressBar>,
    /// Say each k's figures as it is done (`deadlocks build`, whose report
    /// comes only once the file is written).
    k_lines: bool,
}

impl KProgress {
    pub fn new(label: String) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("static template"));
            b
        });
        KProgress { layers: LayerProgress::new(label), bar, k_lines: false }
    }

    /// A progress that also prints a line per k as it is done, above the spinner.
    pub fn with_k_lines(label: String) -> Self {
        KProgress { k_lines: true, ..KProgress::new(label) }
    }
    pub fn finish(&self) {
        self.layers.finish();
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for KProgress {
    fn layer_done(&self, e: &LayerEvent) {
        self.layers.layer_done(e)
    }
    fn probe_step(&self, e: &ProbeEvent) {
        self.layers.probe_step(e)
    }
}

impl KpgProgress for KProgress {
    fn k_started(&self, k: usize) {
        if let Some(b) = &self.bar {
            b.set_message(format!("building the {k}-packet game"));
        }
    }
    fn k_done(&self, s: &KStats) {
        if let (Some(b), true) = (&self.bar, self.k_lines) {
            b.println(format!(
                "k={} done: {} forward + {} backward configurations, {}",
                s.k,
                s.forward_states,
                s.backward_states,
                super::secs(s.seconds)
            ));
        }
    }
}
