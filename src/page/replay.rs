//! The solution replay page: one HTML file, with nothing to fetch, that draws
//! each solved level and plays its solution (play and pause, steps forward and
//! back, a slider over the pushes, push and move counters, the LURD text). The
//! same input gives the same bytes: no timestamps, no random ids.

use crate::model::level::Level;
use serde::Serialize;

/// One solved level of a replay page.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayLevel {
    /// 1-based index in its collection.
    pub index: usize,
    pub title: String,
    /// The level in XSB form, one row per line.
    pub xsb: String,
    /// The solution in LURD (uppercase for pushes); already verified.
    pub solution: String,
    pub pushes: usize,
    pub moves: usize,
}

impl ReplayLevel {
    /// The replay of `solution` on `level`, with the counts `verify` gave it.
    pub fn new(level: &Level, solution: &str, pushes: usize, moves: usize) -> ReplayLevel {
        ReplayLevel {
            index: level.index,
            title: level.title.clone(),
            xsb: level.to_xsb(),
            // the page steps over moves; whitespace (which verify skips) would
            // put the greyed text out of step
            solution: solution.chars().filter(|c| !c.is_whitespace()).collect(),
            pushes,
            moves,
        }
    }
}

const TEMPLATE: &str = include_str!("replay.html");

/// The page for `levels`, in their order.
pub fn replay_html(levels: &[ReplayLevel]) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        levels: &'a [ReplayLevel],
    }
    let json = serde_json::to_string(&Data { levels }).expect("plain data serializes");
    // inside a <script> element no '<' may start a tag or a comment: JSON
    // strings may write it as \u003c
    let json = json.replace('<', "\\u003c");
    TEMPLATE.replacen("/*DATA*/", &json, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;

    fn page() -> String {
        let level = parse_one("#######\n#@ $ .#\n#######\n", "t.xsb").unwrap();
        replay_html(&[ReplayLevel::new(&level, "rRR", 2, 3)])
    }

    #[test]
    fn the_page_carries_the_level_and_solution_and_nothing_to_fetch() {
        let p = page();
        assert!(p.contains(r#""solution":"rRR""#), "{p}");
        assert!(p.contains("#@ $ .#"), "{p}");
        for fetch in ["src=", "href=", "http:", "https:", "@import", "fetch("] {
            assert!(!p.contains(fetch), "the page refers to something outside it: {fetch}");
        }
        assert!(!p.contains("/*DATA*/"));
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        assert_eq!(page(), page());
    }

    #[test]
    fn a_title_cannot_close_the_script() {
        for title in ["</script><script>alert(1)</script>", "<!--<script>"] {
            let mut level = parse_one("#####\n#@$.#\n#####\n", "t.xsb").unwrap();
            level.title = title.into();
            let p = replay_html(&[ReplayLevel::new(&level, "R", 1, 1)]);
            assert_eq!(p.matches("</script>").count(), 2, "{p}");
            let data = &p[p.find("application/json\">").unwrap()..];
            assert!(!data[16..data.find("</script>").unwrap()].contains('<'), "{p}");
        }
    }

    #[test]
    fn whitespace_in_a_solution_is_dropped() {
        let level = parse_one("#######\n#@ $ .#\n#######\n", "t.xsb").unwrap();
        assert_eq!(ReplayLevel::new(&level, "r R\nR", 2, 3).solution, "rRR");
    }
}
