//! Level collections: reading XSB/SOK text into validated levels.
//!
//! A collection is split into level blocks (runs of board rows) with their titles;
//! each block is parsed and validated on its own, so one broken level names its file
//! and line without hiding the others. Accepted syntax: `#` wall, ` `/`-`/`_` floor,
//! `.` goal, `$` box, `*` box on goal, `@` player, `+` player on goal, run-length
//! counts (`4#`), `|` as a row separator, `;` comment lines, free text or
//! `Title: ...` lines as titles.

use std::fmt;

/// Largest grid side we accept. Larger grids are refused with [`LevelErrorKind::TooLarge`].
pub const MAX_SIDE: usize = 256;

/// One level's text as found in a collection, not yet validated.
#[derive(Debug, Clone)]
pub struct LevelText {
    /// 1-based position in the collection.
    pub index: usize,
    pub title: String,
    /// Name of the file (or `<stdin>`) for error messages.
    pub source: String,
    /// Board rows with their 1-based line numbers in the source (RLE already expanded).
    pub rows: Vec<(usize, String)>,
    /// Row-level syntax problem found while splitting (reported by [`LevelText::parse`]).
    syntax_error: Option<(usize, LevelErrorKind)>,
}

/// A validated level on its grid. Coordinates are `(x, y)`, 0-based, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    pub index: usize,
    pub title: String,
    pub source: String,
    pub first_line: usize,
    pub width: usize,
    pub height: usize,
    pub walls: Vec<bool>,
    pub goals: Vec<bool>,
    pub boxes: Vec<bool>,
    pub player: usize,
}

impl Level {
    #[inline]
    pub fn cell(&self, x: usize, y: usize) -> usize {
        y * self.width + x
    }
    pub fn box_count(&self) -> usize {
        self.boxes.iter().filter(|&&b| b).count()
    }
    /// Renders the level back to XSB rows.
    pub fn to_xsb(&self) -> String {
        let mut s = String::new();
        for y in 0..self.height {
            let mut row = String::new();
            for x in 0..self.width {
                let c = self.cell(x, y);
                row.push(match (self.walls[c], self.boxes[c], self.goals[c], self.player == c) {
                    (true, _, _, _) => '#',
                    (_, true, true, _) => '*',
                    (_, true, false, _) => '$',
                    (_, _, true, true) => '+',
                    (_, _, false, true) => '@',
                    (_, _, true, false) => '.',
                    _ => ' ',
                });
            }
            s.push_str(row.trim_end());
            s.push('\n');
        }
        s
    }
}

/// What is wrong with a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelErrorKind {
    NoPlayer,
    SeveralPlayers { count: usize },
    BoxGoalMismatch { boxes: usize, goals: usize },
    NoBoxes,
    Open { x: usize, y: usize },
    UnknownCharacter { ch: char, column: usize },
    TooLarge { what: String },
    Empty,
}

impl fmt::Display for LevelErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LevelErrorKind::NoPlayer => write!(f, "no player ('@' or '+') in the level"),
            LevelErrorKind::SeveralPlayers { count } => {
                write!(f, "{count} players in the level; exactly one is allowed")
            }
            LevelErrorKind::BoxGoalMismatch { boxes, goals } => {
                let plural = |n: &usize, one: &'static str, many: &'static str| if *n == 1 { one } else { many };
                write!(
                    f,
                    "{boxes} {} but {goals} {}; the counts must be equal",
                    plural(boxes, "box", "boxes"),
                    plural(goals, "goal", "goals")
                )
            }
            LevelErrorKind::NoBoxes => write!(f, "the level has no boxes"),
            LevelErrorKind::Open { x, y } => {
                write!(f, "the level is open: the player can walk off the map at column {}, row {}", x + 1, y + 1)
            }
            LevelErrorKind::UnknownCharacter { ch, column } => {
                write!(f, "unknown character {ch:?} at column {column}")
            }
            LevelErrorKind::TooLarge { what } => write!(f, "level too large: {what}"),
            LevelErrorKind::Empty => write!(f, "empty level"),
        }
    }
}

/// A level error with its place: file and 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: level {index}: {kind}")]
pub struct LevelError {
    pub source_name: String,
    pub line: usize,
    pub index: usize,
    pub kind: LevelErrorKind,
}

fn is_board_char(c: char) -> bool {
    matches!(c, '#' | ' ' | '-' | '_' | '.' | '$' | '*' | '@' | '+' | 'p' | 'P' | 'b' | 'B')
}

/// Expands run-length counts and `|` separators. Returns the rows, or the column
/// (1-based) and character of the first unknown character.
fn expand_rle(line: &str) -> Result<Vec<String>, (usize, char)> {
    let mut rows = vec![String::new()];
    let mut count: usize = 0;
    for (i, c) in line.chars().enumerate() {
        if let Some(d) = c.to_digit(10) {
            count = count.saturating_mul(10).saturating_add(d as usize);
            if count > MAX_SIDE * MAX_SIDE {
                return Err((i + 1, c));
            }
            continue;
        }
        let n = if count == 0 { 1 } else { count };
        count = 0;
        if c == '|' {
            for _ in 0..n {
                rows.push(String::new());
            }
            continue;
        }
        if !is_board_char(c) {
            return Err((i + 1, c));
        }
        let c = match c {
            '-' | '_' => ' ',
            'p' => '@',
            'P' => '+',
            'b' => '$',
            'B' => '*',
            other => other,
        };
        let row = rows.last_mut().expect("rows starts non-empty");
        for _ in 0..n {
            row.push(c);
        }
    }
    Ok(rows)
}

/// Is this line (already trimmed at the end) a board row? Rows begin (after
/// indentation) with a wall, a digit run-length count followed by board syntax,
/// or any board character when the line holds nothing else.
fn looks_like_row(line: &str, in_block: bool) -> bool {
    let t = line.trim_start();
    if t.is_empty() || t.starts_with(';') {
        return false;
    }
    if t.starts_with('#') {
        return true;
    }
    let first_non_digit = t.chars().find(|c| !c.is_ascii_digit());
    if t.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        // "4#" style; a line of digits alone (e.g. a title "12") is not a row
        return matches!(first_non_digit, Some(c) if is_board_char(c) || c == '|');
    }
    if t.chars().all(|c| is_board_char(c) || c.is_ascii_digit() || c == '|') {
        return t.contains('#') || in_block;
    }
    // inside a block, a line with walls but a stray character is a broken row
    in_block && t.contains('#')
}

/// Splits a collection into level texts. Never fails: problems inside a level are
/// reported when that level is parsed.
pub fn split_collection(text: &str, source: &str) -> Vec<LevelText> {
    let mut out: Vec<LevelText> = Vec::new();
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut syntax_error: Option<(usize, LevelErrorKind)> = None;
    let mut pending_title: Option<String> = None;
    let mut after_level = false; // lines right after a block may carry `Title:`

    let flush = |rows: &mut Vec<(usize, String)>,
                 syntax_error: &mut Option<(usize, LevelErrorKind)>,
                 pending_title: &mut Option<String>,
                 out: &mut Vec<LevelText>| {
        if rows.is_empty() {
            return false;
        }
        let index = out.len() + 1;
        out.push(LevelText {
            index,
            title: pending_title.take().unwrap_or_else(|| format!("#{index}")),
            source: source.to_string(),
            rows: std::mem::take(rows),
            syntax_error: syntax_error.take(),
        });
        true
    };

    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim_end_matches(['\r', '\n']).trim_end();
        let in_block = !rows.is_empty();
        if looks_like_row(line, in_block) {
            if !in_block {
                after_level = false;
            }
            match expand_rle(line) {
                Ok(expanded) => {
                    for r in expanded {
                        rows.push((lineno, r));
                    }
                }
                Err((column, ch)) => {
                    if syntax_error.is_none() {
                        syntax_error = Some((lineno, LevelErrorKind::UnknownCharacter { ch, column }));
                    }
                    rows.push((lineno, String::new()));
                }
            }
            continue;
        }
        if flush(&mut rows, &mut syntax_error, &mut pending_title, &mut out) {
            after_level = true;
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let lower = t.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("title:") {
            let title = t[t.len() - rest.len()..].trim().to_string();
            if after_level {
                if let Some(last) = out.last_mut() {
                    last.title = title;
                    continue;
                }
            }
            pending_title = Some(title);
            continue;
        }
        if after_level && t.contains(':') && !t.starts_with(';') {
            // other header fields after a level (Author:, Comment:) are not titles
            continue;
        }
        let title = t.trim_start_matches(';').trim();
        if !title.is_empty() {
            pending_title = Some(title.to_string());
        }
    }
    flush(&mut rows, &mut syntax_error, &mut pending_title, &mut out);
    out
}

impl LevelText {
    fn err(&self, line: usize, kind: LevelErrorKind) -> LevelError {
        LevelError { source_name: self.source.clone(), line, index: self.index, kind }
    }

    /// Parses and validates the level.
    pub fn parse(&self) -> Result<Level, LevelError> {
        if let Some((line, kind)) = &self.syntax_error {
            return Err(self.err(*line, kind.clone()));
        }
        let first_line = self.rows.first().map(|r| r.0).unwrap_or(0);
        // drop trailing empty rows produced by a final '|'
        let mut rows: Vec<&(usize, String)> = self.rows.iter().collect();
        while rows.last().is_some_and(|r| r.1.trim().is_empty()) {
            rows.pop();
        }
        if rows.is_empty() {
            return Err(self.err(first_line, LevelErrorKind::Empty));
        }
        let height = rows.len();
        let width = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
        if width > MAX_SIDE || height > MAX_SIDE {
            return Err(self.err(
                first_line,
                LevelErrorKind::TooLarge { what: format!("{width}x{height} grid; the limit is {MAX_SIDE}x{MAX_SIDE}") },
            ));
        }
        let n = width * height;
        let mut walls = vec![false; n];
        let mut goals = vec![false; n];
        let mut boxes = vec![false; n];
        // squares outside any row's text are "void": the player must never reach them
        let mut void = vec![true; n];
        let mut players = Vec::new();
        for (y, (lineno, row)) in rows.iter().enumerate() {
            for (x, ch) in row.chars().enumerate() {
                let c = y * width + x;
                void[c] = false;
                match ch {
                    '#' => walls[c] = true,
                    ' ' => {}
                    '.' => goals[c] = true,
                    '$' => boxes[c] = true,
                    '*' => {
                        boxes[c] = true;
                        goals[c] = true
                    }
                    '@' => players.push((c, *lineno)),
                    '+' => {
                        players.push((c, *lineno));
                        goals[c] = true
                    }
                    other => {
                        return Err(self.err(*lineno, LevelErrorKind::UnknownCharacter { ch: other, column: x + 1 }))
                    }
                }
            }
        }
        let player = match players.as_slice() {
            [] => return Err(self.err(first_line, LevelErrorKind::NoPlayer)),
            [(p, _)] => *p,
            [_, (_, second_line), ..] => {
                return Err(self.err(*second_line, LevelErrorKind::SeveralPlayers { count: players.len() }))
            }
        };
        let nboxes = boxes.iter().filter(|&&b| b).count();
        let ngoals = goals.iter().filter(|&&g| g).count();
        if nboxes == 0 {
            return Err(self.err(first_line, LevelErrorKind::NoBoxes));
        }
        if nboxes != ngoals {
            return Err(self.err(first_line, LevelErrorKind::BoxGoalMismatch { boxes: nboxes, goals: ngoals }));
        }
        // the player (walking through boxes, which may move) must stay inside walls
        let mut seen = vec![false; n];
        let mut stack = vec![player];
        seen[player] = true;
        while let Some(c) = stack.pop() {
            let (x, y) = (c % width, c / width);
            let on_edge = void[c] || x == 0 || y == 0 || x + 1 == width || y + 1 == height;
            if on_edge && !walls[c] {
                return Err(self.err(rows[y].0, LevelErrorKind::Open { x, y }));
            }
            if walls[c] || void[c] {
                continue;
            }
            for nc in [c - 1, c + 1, c - width, c + width] {
                if !seen[nc] {
                    seen[nc] = true;
                    stack.push(nc);
                }
            }
        }
        Ok(Level {
            index: self.index,
            title: self.title.clone(),
            source: self.source.clone(),
            first_line,
            width,
            height,
            walls,
            goals,
            boxes,
            player,
        })
    }
}

/// Parses a single level from text (the first level found).
pub fn parse_one(text: &str, source: &str) -> Result<Level, LevelError> {
    match split_collection(text, source).first() {
        Some(t) => t.parse(),
        None => Err(LevelError { source_name: source.to_string(), line: 1, index: 1, kind: LevelErrorKind::Empty }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "; header comment\n\n; 1\n\n####\n# .#\n#  ###\n#*@  #\n#  $ #\n#  ###\n####\n\n; 2\n\n######\n#    #\n# #@ #\n# $* #\n# .* #\n#    #\n######\n";

    #[test]
    fn splits_levels_with_comment_titles() {
        let v = split_collection(TWO, "t.xsb");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].title, "1");
        assert_eq!(v[1].title, "2");
        let l = v[0].parse().unwrap();
        assert_eq!((l.width, l.height, l.box_count()), (6, 7, 2));
        assert_eq!(l.first_line, 5);
    }

    #[test]
    fn title_lines_after_level_win() {
        let t = "#####\n#@$.#\n#####\nTitle: Tiny\nAuthor: me\n\n#####\n#.$@#\n#####\nTitle: Other\n";
        let v = split_collection(t, "x");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].title, "Tiny");
        assert_eq!(v[1].title, "Other");
    }

    #[test]
    fn rle_rows_expand() {
        let v = split_collection("5#|#@$.#|5#\n", "x");
        let l = v[0].parse().unwrap();
        assert_eq!((l.width, l.height, l.box_count()), (5, 3, 1));
        let v = split_collection("5#\n#@$.#\n-5#\n", "x");
        assert!(v[0].parse().is_ok());
    }

    #[test]
    fn errors_name_line() {
        type Case = (&'static str, usize, fn(&LevelErrorKind) -> bool);
        let cases: &[Case] = &[
            ("#####\n#  .#\n#####\n", 1, |k| matches!(k, LevelErrorKind::NoPlayer)),
            ("#####\n#@$.#\n#@$.#\n#####\n", 3, |k| matches!(k, LevelErrorKind::SeveralPlayers { .. })),
            ("######\n#@$$.#\n######\n", 1, |k| matches!(k, LevelErrorKind::BoxGoalMismatch { .. })),
            ("#####\n#@  #\n#####\n", 1, |k| matches!(k, LevelErrorKind::NoBoxes)),
            ("#####\n#@$. \n#####\n", 2, |k| matches!(k, LevelErrorKind::Open { .. })),
            ("#####\n#@$x.#\n#####\n", 2, |k| matches!(k, LevelErrorKind::UnknownCharacter { ch: 'x', .. })),
        ];
        for (text, line, pred) in cases {
            let e = parse_one(text, "bad.xsb").unwrap_err();
            assert_eq!(e.line, *line, "{text}: {e}");
            assert!(pred(&e.kind), "{text}: {e}");
            assert!(e.to_string().starts_with("bad.xsb:"));
        }
    }
}
