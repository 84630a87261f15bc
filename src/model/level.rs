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
    /// The header fields after the board other than its title (`Author: ...`,
    /// a `Comment:` ... `Comment-End:` block), as their lines, so that a
    /// file written from the collection keeps them.
    pub fields: Vec<String>,
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

/// The title of a level the file gives none: its place in the file read
/// (`#3`), which a file written from it must not carry as a title.
fn placeholder_title(index: usize) -> String {
    format!("#{index}")
}

impl Level {
    /// Whether the file read gave the level a title (not [`placeholder_title`]).
    pub fn has_title(&self) -> bool {
        self.title != placeholder_title(self.index)
    }
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
            // a row with nothing on it (two parts of a level apart) as one
            // floor square outside the walls: a blank line would end the level
            let row = row.trim_end();
            s.push_str(if row.is_empty() { "-" } else { row });
            s.push('\n');
        }
        s
    }
}

/// What is wrong with a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelErrorKind {
    NoPlayer,
    SeveralPlayers {
        count: usize,
    },
    BoxGoalMismatch {
        boxes: usize,
        goals: usize,
    },
    NoBoxes,
    Open {
        x: usize,
        y: usize,
    },
    /// A box or goal outside the walls, where no push can ever reach it.
    OutsideWalls {
        what: &'static str,
        x: usize,
        y: usize,
    },
    UnknownCharacter {
        ch: char,
        column: usize,
    },
    ZeroCount {
        column: usize,
    },
    DanglingCount {
        column: usize,
    },
    TooLarge {
        what: String,
    },
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
            LevelErrorKind::OutsideWalls { what, x, y } => write!(
                f,
                "a {what} at column {}, row {} lies outside the walls, where no push can reach it",
                x + 1,
                y + 1
            ),
            LevelErrorKind::UnknownCharacter { ch, column } => {
                write!(f, "unknown character {ch:?} at column {column}")
            }
            LevelErrorKind::ZeroCount { column } => {
                write!(f, "a run-length count of 0 at column {column}: counts start at 1")
            }
            LevelErrorKind::DanglingCount { column } => {
                write!(f, "a run-length count at column {column} ends its row: it repeats nothing")
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

/// Expands run-length counts and `|` separators. Returns the rows, or what is
/// wrong: the first unknown character, or a count past any board.
fn expand_rle(line: &str) -> Result<Vec<String>, LevelErrorKind> {
    let mut rows = vec![String::new()];
    let mut count: usize = 0;
    // where the count being read starts (1-based), if one is
    let mut count_at = None;
    for (i, c) in line.chars().enumerate() {
        if let Some(d) = c.to_digit(10) {
            count_at.get_or_insert(i + 1);
            count = count.saturating_mul(10).saturating_add(d as usize);
            if count > MAX_SIDE * MAX_SIDE {
                let what = format!("a run-length count at column {} is more than {}", i + 1, MAX_SIDE * MAX_SIDE);
                return Err(LevelErrorKind::TooLarge { what });
            }
            continue;
        }
        if let (Some(column), 0) = (count_at.take(), count) {
            return Err(LevelErrorKind::ZeroCount { column });
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
            return Err(LevelErrorKind::UnknownCharacter { ch: c, column: i + 1 });
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
    if let Some(column) = count_at {
        return Err(LevelErrorKind::DanglingCount { column });
    }
    Ok(rows)
}

/// Is this line (already trimmed at the end) a board row? A level starts
/// only with a line of board syntax alone (board characters, run-length
/// counts, `|`) that holds a wall, or a player: a free-text title such as
/// `3 Wise Men`, `#1 - Easy` or `1.` before a board is no row. Inside a
/// level, a row is board syntax alone (not digits alone), or a line with a
/// wall and a stray character: a broken row, whose error names the character.
fn looks_like_row(line: &str, in_block: bool) -> bool {
    let t = line.trim_start();
    if t.is_empty() || t.starts_with(';') || header_field(t).is_some() {
        return false;
    }
    let syntax = t.chars().all(|c| is_board_char(c) || c.is_ascii_digit() || c == '|');
    if !in_block {
        return syntax && (t.contains('#') || is_player_row(t));
    }
    // a line of digits alone (a title "12") is no row
    (syntax && !t.chars().all(|c| c.is_ascii_digit())) || t.contains('#')
}

/// A line of board symbols alone holding exactly one player (`  @ $`): a row
/// with its player outside the walls, not a title, so the level says so.
/// Lines of boxes or goals alone (`***`, `...`) stay free text.
fn is_player_row(t: &str) -> bool {
    let symbols = t.chars().all(|c| matches!(c, ' ' | '-' | '_' | '.' | '$' | '*' | '@' | '+'));
    symbols && t.chars().filter(|&c| matches!(c, '@' | '+')).count() == 1
}

/// A header line's field name, lowercased (`Title: #1` gives `title`): a
/// word of letters (and digits, `-`, `_` or spaces after the first) before a
/// colon. No board row is one, whatever follows the colon.
fn header_field(t: &str) -> Option<String> {
    let (name, _) = t.split_once(':')?;
    let mut chars = name.chars();
    let first_is_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_is_word = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ' '));
    (first_is_letter && rest_is_word).then(|| name.trim().to_ascii_lowercase())
}

/// A title as it may be printed: control characters (terminal escapes, a
/// bell) written as escapes (`\u{1b}`), never sent to a terminal raw.
fn printable(title: &str) -> String {
    title.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// The lines of `text`, ended by `\r\n`, `\n` or a lone `\r` (old Mac files).
fn lines_of(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let t = rest?;
        match t.find(['\r', '\n']) {
            Some(i) => {
                let skip = if t[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&t[i + skip..]).filter(|r| !r.is_empty());
                Some(&t[..i])
            }
            None => {
                rest = None;
                Some(t)
            }
        }
    })
}

/// Splits a collection into level texts. Never fails: problems inside a level are
/// reported when that level is parsed.
pub fn split_collection(text: &str, source: &str) -> Vec<LevelText> {
    let mut out: Vec<LevelText> = Vec::new();
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut syntax_error: Option<(usize, LevelErrorKind)> = None;
    let mut pending_title: Option<String> = None;
    // lines right after a block may carry `Title:`
    let mut after_level = false;
    // the last level got its title from a line before it, and a blank line
    // has come since: a `Title:` now is the next level's (titles before boards)
    let mut last_titled_before = false;
    let mut blank_since_level = false;
    // the pending title came from a `Title:` field, and so did the last
    // level's: a level has one such field, so the next `Title:` is the next level's
    let mut pending_from_field = false;
    let mut last_field_titled = false;
    // inside a `Comment:` ... `Comment-End:` block: free text, never a title
    let mut in_comment = false;
    // inside a `Solution` section after a level (SOK): moves, never a title
    let mut in_solution = false;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);

    let flush = |rows: &mut Vec<(usize, String)>,
                 syntax_error: &mut Option<(usize, LevelErrorKind)>,
                 pending_title: &mut Option<String>,
                 out: &mut Vec<LevelText>,
                 titled_before: &mut bool| {
        if rows.is_empty() {
            return false;
        }
        let index = out.len() + 1;
        *titled_before = pending_title.is_some();
        out.push(LevelText {
            index,
            title: pending_title.take().unwrap_or_else(|| placeholder_title(index)),
            source: source.to_string(),
            rows: std::mem::take(rows),
            fields: Vec::new(),
            syntax_error: syntax_error.take(),
        });
        true
    };

    for (i, raw) in lines_of(text).enumerate() {
        let lineno = i + 1;
        let line = raw.trim_end();
        let in_block = !rows.is_empty();
        if in_comment {
            let field = header_field(line.trim());
            let keep = after_level.then_some(()).and(out.last_mut());
            if matches!(field.as_deref(), Some("comment-end" | "comment_end")) {
                in_comment = false;
                if let Some(last) = keep {
                    last.fields.push(printable(line.trim()));
                }
                continue;
            }
            if !line.trim_start().starts_with('#') {
                if let Some(last) = keep {
                    last.fields.push(printable(line));
                }
                continue;
            }
            in_comment = false; // a board: the block was never closed
        }
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
                Err(kind) => {
                    if syntax_error.is_none() {
                        syntax_error = Some((lineno, kind));
                    }
                    rows.push((lineno, String::new()));
                }
            }
            continue;
        }
        let field_titled = pending_from_field && pending_title.is_some();
        if flush(&mut rows, &mut syntax_error, &mut pending_title, &mut out, &mut last_titled_before) {
            after_level = true;
            blank_since_level = false;
            last_field_titled = field_titled;
            pending_from_field = false;
        }
        let t = line.trim();
        if t.is_empty() {
            blank_since_level = true;
            in_solution = false;
            continue;
        }
        // a SOK `Solution` section: its moves, up to a blank line, are no title
        let first_word = t.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
        if first_word.eq_ignore_ascii_case("solution") {
            in_solution = true;
            continue;
        }
        if in_solution {
            continue;
        }
        let field = header_field(t);
        if field.as_deref() == Some("title") {
            let title = printable(t.split_once(':').map_or("", |(_, v)| v).trim());
            if after_level && !(last_titled_before && blank_since_level) && !last_field_titled {
                if let Some(last) = out.last_mut() {
                    last.title = title;
                    continue;
                }
            }
            pending_title = Some(title);
            pending_from_field = true;
            continue;
        }
        if field.as_deref() == Some("comment") && t.split_once(':').is_some_and(|(_, v)| v.trim().is_empty()) {
            in_comment = true;
            if let Some(last) = after_level.then_some(()).and(out.last_mut()) {
                last.fields.push(printable(t));
            }
            continue;
        }
        if after_level && field.is_some() {
            // other header fields after a level (Author:, Comment:) are not
            // titles: they are the level's, kept for files written from it
            if let Some(last) = out.last_mut() {
                last.fields.push(printable(t));
            }
            continue;
        }
        let title = t.trim_start_matches(';').trim();
        if !title.is_empty() {
            pending_title = Some(printable(title));
            pending_from_field = false;
        }
    }
    flush(&mut rows, &mut syntax_error, &mut pending_title, &mut out, &mut last_titled_before);
    out
}

impl LevelText {
    /// Whether the file gave the level a title (not [`placeholder_title`]).
    pub fn has_title(&self) -> bool {
        self.title != placeholder_title(self.index)
    }

    fn err(&self, line: usize, kind: LevelErrorKind) -> LevelError {
        LevelError { source_name: self.source.clone(), line, index: self.index, kind }
    }

    /// Parses and validates the level.
    pub fn parse(&self) -> Result<Level, LevelError> {
        if let Some((line, kind)) = &self.syntax_error {
            return Err(self.err(*line, kind.clone()));
        }
        // drop empty rows at either end, produced by a '|' that starts or
        // ends a line: written back they would be blank lines, which read as
        // no row at all (the same level on another grid)
        let mut rows: Vec<&(usize, String)> = self.rows.iter().collect();
        while rows.last().is_some_and(|r| r.1.trim().is_empty()) {
            rows.pop();
        }
        let lead = rows.iter().take_while(|r| r.1.trim().is_empty()).count();
        rows.drain(..lead);
        let Some(first_line) = rows.first().map(|r| r.0) else {
            return Err(self.err(self.rows.first().map_or(0, |r| r.0), LevelErrorKind::Empty));
        };
        let height = rows.len();
        // floor drawn past a row's last wall or object ('-' or '_' at its
        // end) lies outside the level: it is not kept, so that the level
        // writes back as the same grid
        let width = rows.iter().map(|r| r.1.trim_end().chars().count()).max().unwrap_or(0);
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
            for (x, ch) in row.trim_end().chars().enumerate() {
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
        // a box or goal outside the walls (in a region that reaches the
        // grid's edge) can never be pushed or reached: the level is not what
        // its author meant. Refusing it (and making a box on its goal there
        // a wall) also means a level's first row holds a wall, so that
        // written back it never reads as a title.
        let mut outside = vec![false; n];
        let mut stack: Vec<usize> = (0..n)
            .filter(|&c| {
                let (x, y) = (c % width, c / width);
                !walls[c] && (void[c] || x == 0 || y == 0 || x + 1 == width || y + 1 == height)
            })
            .collect();
        for &c in &stack {
            outside[c] = true;
        }
        while let Some(c) = stack.pop() {
            let (x, y) = (c % width, c / width);
            let around = [
                (x > 0).then(|| c - 1),
                (x + 1 < width).then(|| c + 1),
                (y > 0).then(|| c - width),
                (y + 1 < height).then(|| c + width),
            ];
            for nc in around.into_iter().flatten() {
                if !walls[nc] && !outside[nc] {
                    outside[nc] = true;
                    stack.push(nc);
                }
            }
        }
        // a box on its goal out there never moves and asks for nothing: the
        // same game as a wall, which is what it becomes
        for c in 0..n {
            if outside[c] && boxes[c] && goals[c] {
                (walls[c], boxes[c], goals[c]) = (true, false, false);
            }
        }
        if let Some(c) = (0..n).find(|&c| outside[c] && (boxes[c] || goals[c])) {
            let what = if boxes[c] { "box" } else { "goal" };
            let (x, y) = (c % width, c / width);
            return Err(self.err(rows[y].0, LevelErrorKind::OutsideWalls { what, x, y }));
        }
        let nboxes = boxes.iter().filter(|&&b| b).count();
        let ngoals = goals.iter().filter(|&&g| g).count();
        if nboxes == 0 {
            return Err(self.err(first_line, LevelErrorKind::NoBoxes));
        }
        if nboxes != ngoals {
            return Err(self.err(first_line, LevelErrorKind::BoxGoalMismatch { boxes: nboxes, goals: ngoals }));
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
    fn a_title_with_a_hash_after_its_board_is_a_title_not_a_broken_row() {
        // `solve --output` writes untitled levels as `Title: #1`, which once
        // read back as a row with an unknown character 'T'
        let v = split_collection("#####\n#@$.#\n#####\nTitle: #1\n\n#####\n#.$@#\n#####\nTitle: A # B\n", "x");
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].title.as_str(), v[1].title.as_str()), ("#1", "A # B"));
        assert!(v.iter().all(|l| l.parse().is_ok()));
        // a stray character inside a row is still an error in that row
        let v = split_collection("#####\n#@$:.#\n#####\n", "x");
        assert!(matches!(v[0].parse().unwrap_err().kind, LevelErrorKind::UnknownCharacter { ch: ':', .. }));
    }

    #[test]
    fn titles_before_their_boards_stay_with_them() {
        let t = "Title: A\n#####\n#@$.#\n#####\n\nTitle: B\n######\n#@$ .#\n######\n\nTitle: C\n#######\n#@$  .#\n#######\n";
        let v = split_collection(t, "x");
        let titles: Vec<&str> = v.iter().map(|l| l.title.as_str()).collect();
        assert_eq!(titles, ["A", "B", "C"]);
        // a comment title before and a Title: field right after: the field wins
        let v = split_collection("; 1\n#####\n#@$.#\n#####\nTitle: Tiny\n", "x");
        assert_eq!(v[0].title, "Tiny");
    }

    #[test]
    fn empty_rows_from_bars_write_back_as_the_same_level() {
        // found by the `levels` fuzz target: "| ######" made an empty first
        // row, which `to_xsb` wrote as a blank line and the reader then
        // dropped, so the level came back on a grid one row shorter
        let text = "| ######\n##    #\n#  ## #\n# # $ #\n#  * .#\n## #@##\n #   #\n #####\n";
        let level = parse_one(text, "x").unwrap();
        assert_eq!((level.width, level.height), (7, 8));
        let again = parse_one(&level.to_xsb(), "again").unwrap();
        assert_eq!(
            (&again.walls, &again.goals, &again.boxes, again.player),
            (&level.walls, &level.goals, &level.boxes, level.player)
        );
        // an empty row inside the level is written as a row, not a blank line
        // that split the level written back in two
        let level = parse_one("#####|#@$.#|#####||#####|#   #|#####\n", "x").unwrap();
        let written = level.to_xsb();
        assert_eq!(split_collection(&written, "again").len(), 1, "{written}");
        let again = parse_one(&written, "again").unwrap();
        assert_eq!(
            (&again.walls, &again.goals, &again.boxes, again.player),
            (&level.walls, &level.goals, &level.boxes, level.player)
        );
        // nor does floor drawn past a row's end widen the level (found by the
        // fuzz target: "########-" made a grid one column wider than written back)
        let level = parse_one("#####\n#@$.#\n#####--\n", "x").unwrap();
        assert_eq!((level.width, level.height), (5, 3));
    }

    #[test]
    fn a_levels_other_fields_are_kept_as_read() {
        // `solve --output` wrote a collection without its authors and comments
        let t = "#####\n#@$.#\n#####\nTitle: Tiny\nAuthor: me\nComment:\nvery hard one\n  really\nComment-End:\n\n#####\n#.$@#\n#####\nAuthor: you\nDate: 2026\n";
        let v = split_collection(t, "x");
        assert_eq!(v[0].fields, ["Author: me", "Comment:", "very hard one", "  really", "Comment-End:"]);
        assert_eq!(v[1].fields, ["Author: you", "Date: 2026"]);
        // fields before any board belong to no level
        assert!(split_collection("Author: nobody\n#####\n#@$.#\n#####\n", "x")[0].fields.is_empty());
    }

    #[test]
    fn comment_blocks_byte_order_marks_and_old_mac_line_ends_are_read() {
        let t = "#####\n#@$.#\n#####\nComment:\nvery hard one\nreally\nComment-End:\n\n#####\n#.$@#\n#####\n";
        let v = split_collection(t, "x");
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].title, "#2", "a comment is not a title");
        // an unclosed comment block ends at the next board
        let v = split_collection("Comment:\nnotes\n#####\n#@$.#\n#####\n", "x");
        assert_eq!(v.len(), 1);
        assert!(v[0].parse().is_ok());
        let v = split_collection("\u{feff}; bom\n#####\n#@$.#\n#####\n", "x");
        assert_eq!(v[0].title, "bom");
        let v = split_collection("; cr\r#####\r#@$.#\r#####\r\r; two\r#####\r#.$@#\r#####\r", "x");
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].title.as_str(), v[1].parse().unwrap().first_line), ("two", 7));
        let v = split_collection("; crlf\r\n#####\r\n#@$.#\r\n#####\r\n", "x");
        assert_eq!(v[0].parse().unwrap().first_line, 2);
    }

    #[test]
    fn a_player_drawn_above_the_walls_is_an_open_level_not_a_title() {
        let v = split_collection("; real title\n   @\n #####\n #.$ #\n #####\n", "x");
        assert_eq!((v.len(), v[0].title.as_str()), (1, "real title"));
        let e = v[0].parse().unwrap_err();
        assert!(matches!(e.kind, LevelErrorKind::Open { .. }), "{e}");
        assert_eq!(e.line, 2);
        // lines of boxes or goals alone, and a lone plus among words, stay free text
        for title in ["***", "...", "$$$", "a + b", "@@"] {
            let v = split_collection(&format!("{title}\n#####\n#@$.#\n#####\n"), "x");
            assert_eq!((v.len(), v[0].title.as_str()), (1, title));
        }
    }

    #[test]
    fn a_box_or_goal_outside_the_walls_is_refused_so_no_first_row_reads_back_as_a_title() {
        // found by the levels fuzz target: `$` above the walls (drawn with
        // `|`) was a first row; written back it read as a title (as a line
        // of boxes alone before a board does) and the level lost a box
        let e = split_collection("  $|#####|#@$.#|#.  #|#####\n", "x")[0].parse().unwrap_err();
        assert_eq!(e.kind, LevelErrorKind::OutsideWalls { what: "box", x: 2, y: 0 });
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("a box at column 3, row 1 lies outside the walls"), "{e}");
        // beside the walls, below them, a goal
        for (text, what, x, y) in [
            ("#####\n#@$.#\n#####\n  .\n", "goal", 2, 3),
            ("#####   \n#@$.# $ \n#####   \n", "box", 6, 1),
            ("#######\n#@$.# #\n#  #$ #\n#######\n##.\n", "goal", 2, 4),
        ] {
            let e = split_collection(text, "x")[0].parse().unwrap_err();
            assert_eq!(e.kind, LevelErrorKind::OutsideWalls { what, x, y }, "{text}");
        }
        // a box on its goal out there is the same game as a wall, and
        // becomes one: a first row of them writes back as a row
        let level = split_collection("  *|#####|#@$.#|#####\n", "x")[0].parse().unwrap();
        assert!(level.walls[2] && !level.boxes[2] && !level.goals[2]);
        assert_eq!(level.box_count(), 1);
        let again = split_collection(&level.to_xsb(), "x")[0].parse().unwrap();
        assert_eq!((&again.walls, &again.boxes, &again.goals), (&level.walls, &level.boxes, &level.goals));
        // a box in a sealed room inside the walls is no error
        let level = split_collection("#######\n#@$.#.#\n####$##\n#######\n", "x")[0].parse();
        assert!(level.is_ok(), "{level:?}");
        // so every level that parses starts with a wall, and writes back as read
        let level = split_collection("; t\n #####\n #@$.#\n #####\n", "x")[0].parse().unwrap();
        let again = split_collection(&level.to_xsb(), "x")[0].parse().unwrap();
        assert_eq!((again.width, again.height, &again.boxes), (level.width, level.height, &level.boxes));
    }

    #[test]
    fn titles_that_start_with_a_digit_or_a_hash_are_titles_not_rows() {
        // "3 Wise Men" was read as a run-length row ("unknown character 'W'"),
        // "1." as a row with a goal ("1 box but 2 goals")
        for title in ["3 Wise Men", "100 Boxes", "5 - Easy", "#1 - Easy", "1.", "12", "2nd level"] {
            let v = split_collection(&format!("{title}\n#####\n#@$.#\n#####\n"), "x");
            assert_eq!((v.len(), v[0].title.as_str()), (1, title));
            assert!(v[0].parse().is_ok(), "{title}: {:?}", v[0].parse());
        }
        // a level may start with run-length rows
        let v = split_collection("; t\n5#\n#@$.#\n-5#\n", "x");
        assert_eq!(v[0].parse().unwrap().height, 3);
    }

    #[test]
    fn a_sok_solution_section_is_no_title() {
        // an untitled level after a solved one took the solution's moves as its title
        let t = "#####\n#@$.#\n#####\nSolution (moves 1, pushes 1)\nR\n\n######\n#@$ .#\n######\nSolution:\nRR\nrr\n";
        let v = split_collection(t, "x");
        let titles: Vec<&str> = v.iter().map(|l| l.title.as_str()).collect();
        assert_eq!(titles, ["#1", "#2"]);
    }

    #[test]
    fn a_title_field_between_boards_without_a_blank_line_is_the_next_levels() {
        // level 1's Title: A was overwritten by B, and level 2 had none
        let v = split_collection("Title: A\n#####\n#@$.#\n#####\nTitle: B\n######\n#@ $.#\n######\n", "x");
        let titles: Vec<&str> = v.iter().map(|l| l.title.as_str()).collect();
        assert_eq!(titles, ["A", "B"]);
    }

    #[test]
    fn control_characters_in_titles_are_escaped_not_kept() {
        // a title could send terminal escapes to whoever listed the file
        let v = split_collection("; evil \u{1b}[31mRED \u{7}bell\n#####\n#@$.#\n#####\nTitle: a\tb\n", "x");
        assert_eq!(v[0].title, "a\\tb");
        let v = split_collection("; evil \u{1b}[31mRED \u{7}bell\n#####\n#@$.#\n#####\n", "x");
        assert_eq!(v[0].title, "evil \\u{1b}[31mRED \\u{7}bell");
    }

    #[test]
    fn a_run_length_count_past_any_board_says_so() {
        let e = split_collection("5#\n#@$.#\n99999#\n", "x")[0].parse().unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("run-length count at column 5"), "{e}");
    }

    #[test]
    fn a_run_length_count_of_zero_is_an_error_not_one() {
        // "0#5#" read as six walls
        let e = split_collection("5#\n#@$.#\n0#5#\n", "x")[0].parse().unwrap_err();
        assert_eq!(e.kind, LevelErrorKind::ZeroCount { column: 1 });
        assert_eq!(e.line, 3);
        assert!(split_collection("10#\n#@$.-----#\n10#\n", "x")[0].parse().is_ok(), "a 0 inside a count is fine");
    }

    #[test]
    fn a_run_length_count_at_the_end_of_a_row_is_an_error() {
        // found by the `levels` fuzz target: "##. . #    3" dropped the 3 and
        // kept the spaces before it as floor, a level wider than it was drawn
        let e = split_collection("#######\n#@$ . #    3\n#######\n", "x")[0].parse().unwrap_err();
        assert_eq!((&e.kind, e.line), (&LevelErrorKind::DanglingCount { column: 12 }, 2));
        assert!(e.to_string().contains("count at column 12 ends its row"), "{e}");
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
