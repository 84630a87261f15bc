//! Board analysis: the floor graph inside the walls, dead squares for pushes and
//! pulls, and the start and goal configurations as floor indices.
//!
//! Only squares the player can ever stand on or a box can ever occupy are indexed
//! (the region reachable from the player when boxes are walked through). Boxes the
//! player can never reach that stand on goals are turned into walls; other
//! unreachable boxes, or goals without a reachable box, make the level provably
//! unsolvable (reported through [`Board::unsolvable`], not as an error).

use super::bitgrid::BitGrid;
use super::key::{KeySpace, MAX_FLOOR_SQUARES};
use super::level::{Level, LevelError, LevelErrorKind};

/// Directions in the order up, right, down, left. `opposite(d) = d ^ 2`.
pub const DIRS: usize = 4;
/// LURD letters for walks (lowercase) per direction.
pub const WALK_LETTERS: [char; 4] = ['u', 'r', 'd', 'l'];
/// LURD letters for pushes (uppercase) per direction.
pub const PUSH_LETTERS: [char; 4] = ['U', 'R', 'D', 'L'];
/// No neighbour (a wall or outside the floor).
pub const NONE: u16 = u16::MAX;

#[inline]
pub const fn opposite(d: usize) -> usize {
    d ^ 2
}

/// A level reduced to its floor graph.
#[derive(Debug, Clone)]
pub struct Board {
    pub width: usize,
    pub height: usize,
    /// Floor index -> grid cell.
    pub cell_of: Vec<usize>,
    /// Grid cell -> floor index or [`NONE`].
    pub floor_of: Vec<u16>,
    /// `nbr[f * 4 + d]`: the floor square next to `f` in direction `d`, or [`NONE`].
    pub nbr: Vec<u16>,
    pub is_goal: Vec<bool>,
    /// Goals as sorted floor indices.
    pub goals: Vec<u16>,
    /// Start boxes as sorted floor indices.
    pub start_boxes: Vec<u16>,
    pub is_start_box: Vec<bool>,
    /// Start player square (not normalized).
    pub start_player: u16,
    /// A box here can never reach a goal by pushes (forward pruning).
    pub dead_forward: Vec<bool>,
    /// No start box can be pushed here (backward pruning: the reverse exclusion zone).
    pub dead_backward: Vec<bool>,
    /// Grid walls after fixed boxes were turned into walls (for drawing and replay).
    pub walls: Vec<bool>,
    /// Boxes that can never move and stand on goals, turned into walls (grid cells).
    pub fixed_boxes: Vec<usize>,
    /// Why the level is provably unsolvable, if it is.
    pub unsolvable: Option<String>,
    pub keyspace: KeySpace,
    /// The floor as bitboard rows, for grids up to 64 columns wide (the fast
    /// path of the player's flood); `None` for wider grids.
    pub bits: Option<BitGrid>,
}

impl Board {
    pub fn new(level: &Level) -> Result<Board, LevelError> {
        let (w, h) = (level.width, level.height);
        let n = w * h;
        let err =
            |kind| LevelError { source_name: level.source.clone(), line: level.first_line, index: level.index, kind };
        // interior: reachable from the player walking through boxes
        let mut inside = vec![false; n];
        let mut stack = vec![level.player];
        inside[level.player] = true;
        while let Some(c) = stack.pop() {
            for nc in [c - 1, c + 1, c - w, c + w] {
                if !level.walls[nc] && !inside[nc] {
                    inside[nc] = true;
                    stack.push(nc);
                }
            }
        }
        let mut walls = level.walls.clone();
        let mut fixed_boxes = Vec::new();
        let mut unsolvable = None;
        for c in 0..n {
            if inside[c] || walls[c] {
                continue;
            }
            if level.boxes[c] && level.goals[c] {
                walls[c] = true;
                fixed_boxes.push(c);
            } else if level.boxes[c] && unsolvable.is_none() {
                unsolvable = Some(format!(
                    "the box at column {}, row {} can never be reached by the player",
                    c % w + 1,
                    c / w + 1
                ));
            } else if level.goals[c] && unsolvable.is_none() {
                unsolvable =
                    Some(format!("the goal at column {}, row {} can never be reached by a box", c % w + 1, c / w + 1));
            }
        }
        let cell_of: Vec<usize> = (0..n).filter(|&c| inside[c]).collect();
        if cell_of.len() > MAX_FLOOR_SQUARES {
            return Err(err(LevelErrorKind::TooLarge {
                what: format!("{} floor squares; the limit is {MAX_FLOOR_SQUARES}", cell_of.len()),
            }));
        }
        let mut floor_of = vec![NONE; n];
        for (f, &c) in cell_of.iter().enumerate() {
            floor_of[c] = f as u16;
        }
        let nf = cell_of.len();
        let mut nbr = vec![NONE; nf * DIRS];
        for (f, &c) in cell_of.iter().enumerate() {
            // interior squares are never on the grid edge (the level is closed)
            let around = [c - w, c + 1, c + w, c - 1];
            for d in 0..DIRS {
                nbr[f * DIRS + d] = floor_of[around[d]];
            }
        }
        let is_goal: Vec<bool> = cell_of.iter().map(|&c| level.goals[c]).collect();
        let goals: Vec<u16> = (0..nf as u16).filter(|&f| is_goal[f as usize]).collect();
        let start_boxes: Vec<u16> = (0..nf as u16).filter(|&f| level.boxes[cell_of[f as usize]]).collect();
        let mut is_start_box = vec![false; nf];
        for &b in &start_boxes {
            is_start_box[b as usize] = true;
        }
        let keyspace = KeySpace::new(nf, start_boxes.len())
            .ok_or_else(|| err(LevelErrorKind::TooLarge { what: format!("{nf} floor squares") }))?;
        let mut board = Board {
            width: w,
            height: h,
            cell_of,
            floor_of: floor_of.clone(),
            nbr,
            is_goal,
            goals,
            start_boxes,
            is_start_box,
            start_player: floor_of[level.player],
            dead_forward: Vec::new(),
            dead_backward: Vec::new(),
            walls,
            fixed_boxes,
            unsolvable,
            keyspace,
            bits: None,
        };
        board.dead_forward = board.lone_box_reach(&board.goals, false).iter().map(|&r| !r).collect();
        board.dead_backward = board.lone_box_reach(&board.start_boxes, true).iter().map(|&r| !r).collect();
        board.bits = BitGrid::new(w, h, &board.cell_of, &board.is_goal, &board.dead_forward);
        if board.unsolvable.is_none() {
            if let Some(&b) = board.start_boxes.iter().find(|&&b| board.dead_forward[b as usize]) {
                let c = board.cell_of[b as usize];
                board.unsolvable =
                    Some(format!("the box at column {}, row {} can never reach a goal", c % w + 1, c / w + 1));
            }
        }
        Ok(board)
    }

    #[inline]
    pub fn floor_count(&self) -> usize {
        self.cell_of.len()
    }

    #[inline]
    pub fn box_count(&self) -> usize {
        self.start_boxes.len()
    }

    #[inline]
    pub fn neighbour(&self, f: u16, d: usize) -> u16 {
        self.nbr[f as usize * DIRS + d]
    }

    /// Squares a lone box can reach from `sources`, by pulls (`push == false`, which
    /// is where a box can start and still be pushed to a source) or by pushes.
    /// The player is assumed to reach any side of the box: an over-approximation,
    /// so squares outside the result are certainly dead.
    pub fn lone_box_reach(&self, sources: &[u16], push: bool) -> Vec<bool> {
        let mut reach = vec![false; self.floor_count()];
        let mut stack: Vec<u16> = sources.to_vec();
        for &s in sources {
            reach[s as usize] = true;
        }
        while let Some(b) = stack.pop() {
            for d in 0..DIRS {
                let to = self.neighbour(b, d);
                if to == NONE {
                    continue;
                }
                // push to `to` needs the player behind the box; a pull to `to` needs
                // the square beyond `to` for the player to step back into
                let player = if push { self.neighbour(b, opposite(d)) } else { self.neighbour(to, d) };
                if player != NONE && !reach[to as usize] {
                    reach[to as usize] = true;
                    stack.push(to);
                }
            }
        }
        reach
    }

    /// A hash of everything that determines the search space: grid size, walls
    /// (fixed boxes included), goals, start boxes and the start player. Deadlock
    /// databases carry it so one built for another level is refused.
    pub fn fingerprint(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&(self.width as u64).to_le_bytes());
        h.update(&(self.height as u64).to_le_bytes());
        let bits: Vec<u8> = self.walls.iter().map(|&w| w as u8).collect();
        h.update(&bits);
        for f in self.goals.iter().chain(&self.start_boxes).chain(std::iter::once(&self.start_player)) {
            h.update(&(self.cell_of[*f as usize] as u64).to_le_bytes());
        }
        h.digest()
    }

    /// Draws the board with the given boxes and player square as XSB rows.
    pub fn draw(&self, boxes: &[u16], player: Option<u16>) -> String {
        let mut grid: Vec<Vec<char>> = (0..self.height)
            .map(|y| (0..self.width).map(|x| if self.walls[y * self.width + x] { '#' } else { ' ' }).collect())
            .collect();
        for (f, &c) in self.cell_of.iter().enumerate() {
            let (x, y) = (c % self.width, c / self.width);
            let is_box = boxes.contains(&(f as u16));
            let is_player = player == Some(f as u16);
            grid[y][x] = match (is_box, self.is_goal[f], is_player) {
                (true, true, _) => '*',
                (true, false, _) => '$',
                (false, true, true) => '+',
                (false, false, true) => '@',
                (false, true, false) => '.',
                _ => ' ',
            };
        }
        grid.into_iter().map(|r| r.into_iter().collect::<String>().trim_end().to_string() + "\n").collect()
    }

    /// Grid column and row (1-based) of a floor square, for messages.
    pub fn coords(&self, f: u16) -> (usize, usize) {
        let c = self.cell_of[f as usize];
        (c % self.width + 1, c / self.width + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;

    #[test]
    fn unreachable_boxes_on_goals_become_walls() {
        let t = "#######\n#@$ .##\n#######\n##*####\n#######\n";
        // the '*' is enclosed by walls: fixed, not an error
        let l = parse_one(t, "x").unwrap();
        let b = Board::new(&l).unwrap();
        assert_eq!(b.fixed_boxes.len(), 1);
        assert_eq!(b.box_count(), 1);
        assert!(b.unsolvable.is_none());
    }

    #[test]
    fn unreachable_box_off_goal_is_unsolvable() {
        let t = "#######\n#@$ .##\n#######\n##$.###\n#######\n";
        let l = parse_one(t, "x").unwrap();
        let b = Board::new(&l).unwrap();
        assert!(b.unsolvable.is_some());
    }

    #[test]
    fn corners_are_dead() {
        let t = "######\n#@ $.#\n#    #\n######\n";
        let l = parse_one(t, "x").unwrap();
        let b = Board::new(&l).unwrap();
        let corner = b.floor_of[l.cell(1, 2)];
        assert!(b.dead_forward[corner as usize]);
        let goal = b.floor_of[l.cell(4, 1)];
        assert!(!b.dead_forward[goal as usize]);
    }
}
