//! A measurement, not part of the solver: how far candidate lower bounds fall
//! short of the true distance along a push-optimal solution, to tell which
//! strengthening of the bounded search's bound would pay before building it.
//!
//! ```text
//! cargo run --release --example bound_gaps -- LEVELS.xsb N SOLUTION.lurd [--player-anywhere]
//! ```
//!
//! `SOLUTION.lurd` is a push-optimal solution of level `N` (say, the
//! `solution` of `sokoshard solve --objective pushes --json`): the state after
//! push `i` of `L` is then exactly `L - i` pushes from the goal. For every
//! state it sums `true - bound` over the solution, for each bound:
//!
//! - `solver`: the solver's own (matching plus greedily picked pair penalties);
//! - `exact pairs`: the matching plus the best set of disjoint pairs (exact, by
//!   dynamic programming over subsets of the boxes);
//! - `exact pairs+triples`: the same over disjoint pairs and triples, a triple's
//!   penalty taken from 3-box games played like the solver's 2-box ones (the
//!   player's region of the floor with the three squares blocked counts; one
//!   game per unordered set of three goals, labelled boxes relaxed to the
//!   least penalty over the goals' orders);
//! - `player-aware matching`: the matching under lone-box distances that know
//!   which side of the box the player is on (the region of the floor with the
//!   box's square blocked), no pairs;
//! - `player-aware matching + pairs`: that matching plus the best disjoint pairs
//!   of penalties taken relative to those distances.
//!
//! With `--player-anywhere` the 3-box games let the player reach every side
//! of every box (one state per set of squares, much cheaper).
//!
//! Any bound above the truth would be a bug; the tool says so. The 3-box
//! tables cost about `C(goals, 3)` games over `C(floor, 3)` states; the exact
//! packings `2^boxes` steps per state, so levels of more than 16 boxes skip them.

use sokoshard::model::board::{Board, DIRS, NONE};
use sokoshard::model::bounds::LowerBounds;
use sokoshard::model::level::split_collection;
use std::collections::HashMap;

/// Region labels of the floor with some squares blocked, computed once per set.
struct Labels {
    floor: usize,
    /// Every square in one region: the player may reach any side of a box.
    flat: bool,
    cache: HashMap<Vec<u16>, Vec<u8>>,
}

impl Labels {
    fn of(&mut self, board: &Board, blocked: &[u16]) -> &[u8] {
        let floor = self.floor;
        let flat = self.flat;
        self.cache.entry(blocked.to_vec()).or_insert_with(|| {
            let mut lab = vec![u8::MAX; floor];
            if flat {
                lab.iter_mut().enumerate().filter(|(s, _)| !blocked.contains(&(*s as u16))).for_each(|(_, l)| *l = 0);
                return lab;
            }
            let mut next = 0u8;
            let mut stack = Vec::new();
            for s in 0..floor as u16 {
                if blocked.contains(&s) || lab[s as usize] != u8::MAX {
                    continue;
                }
                lab[s as usize] = next;
                stack.push(s);
                while let Some(f) = stack.pop() {
                    for d in 0..DIRS {
                        let g = board.neighbour(f, d);
                        if g != NONE && !blocked.contains(&g) && lab[g as usize] == u8::MAX {
                            lab[g as usize] = next;
                            stack.push(g);
                        }
                    }
                }
                next += 1;
            }
            lab
        })
    }

    fn regions(&mut self, board: &Board, blocked: &[u16]) -> u8 {
        self.of(board, blocked).iter().filter(|&&r| r != u8::MAX).max().map_or(0, |&r| r + 1)
    }
}

/// Breadth-first search of the k-box game by pulls from `goals` (the player
/// anywhere): the pushes from every (sorted boxes, player region) to them.
fn game(board: &Board, labels: &mut Labels, goals: &[u16]) -> HashMap<(Vec<u16>, u8), u32> {
    let mut depth = HashMap::new();
    let mut queue = Vec::new();
    for r in 0..labels.regions(board, goals) {
        depth.insert((goals.to_vec(), r), 0);
        queue.push((goals.to_vec(), r));
    }
    let mut head = 0;
    while head < queue.len() {
        let (boxes, r) = queue[head].clone();
        head += 1;
        let d = depth[&(boxes.clone(), r)];
        let lab = labels.of(board, &boxes).to_vec();
        for w in 0..boxes.len() {
            for dir in 0..DIRS {
                // the player on n1 pulls the box from boxes[w] to n1, stepping to n2
                let n1 = board.neighbour(boxes[w], dir);
                let n2 = if n1 == NONE { NONE } else { board.neighbour(n1, dir) };
                if n2 == NONE || boxes.contains(&n1) || boxes.contains(&n2) || lab[n1 as usize] != r {
                    continue;
                }
                let mut next = boxes.clone();
                next[w] = n1;
                next.sort_unstable();
                let nr = labels.of(board, &next)[n2 as usize];
                if let std::collections::hash_map::Entry::Vacant(v) = depth.entry((next.clone(), nr)) {
                    v.insert(d + 1);
                    queue.push((next, nr));
                }
            }
        }
    }
    depth
}

/// Every ordering of `0..k`.
fn orders(k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in orders(k - 1) {
        for at in 0..=rest.len() {
            let mut o = rest.clone();
            o.insert(at, k - 1);
            out.push(o);
        }
    }
    out
}

/// The least penalty of every (boxes, region) of the k-box games over every
/// set of k goals: the game's pushes less the largest sum of `lone` distances
/// over the orders of the goals (the boxes of a game are not labelled).
fn penalties(
    board: &Board,
    labels: &mut Labels,
    k: usize,
    lone: &dyn Fn(usize, u16, u16) -> u32,
) -> HashMap<(Vec<u16>, u8), u32> {
    let goals = &board.goals;
    let mut best: HashMap<(Vec<u16>, u8), u32> = HashMap::new();
    let mut pick: Vec<usize> = (0..k).collect();
    let orders = orders(k);
    loop {
        let set: Vec<u16> = pick.iter().map(|&g| goals[g]).collect();
        for ((boxes, r), d) in game(board, labels, &set) {
            // the player's square for `lone`: any square of region r
            let lab = labels.of(board, &boxes);
            let at = lab.iter().position(|&x| x == r).unwrap_or(0) as u16;
            let most = orders
                .iter()
                .map(|o| (0..k).map(|t| lone(pick[o[t]], boxes[t], at)).fold(0u32, u32::saturating_add))
                .max()
                .unwrap_or(0);
            let e = best.entry((boxes, r)).or_insert(u32::MAX);
            *e = (*e).min(d.saturating_sub(most));
        }
        // the next k-subset of the goals
        let Some(i) = (0..k).rev().find(|&i| pick[i] < goals.len() - k + i) else { break };
        pick[i] += 1;
        for j in i + 1..k {
            pick[j] = pick[j - 1] + 1;
        }
    }
    best
}

/// The cheapest perfect matching (Hungarian method); `u32::MAX` if none.
fn matching(cost: &[Vec<u32>]) -> u32 {
    let n = cost.len();
    const INF: i64 = 1 << 40;
    let c = |i: usize, j: usize| if cost[i][j] == u32::MAX { INF } else { cost[i][j] as i64 };
    let (mut u, mut v, mut p, mut way) =
        (vec![0i64; n + 1], vec![0i64; n + 1], vec![0usize; n + 1], vec![0usize; n + 1]);
    for i in 1..=n {
        p[0] = i;
        let (mut j0, mut minv, mut used) = (0, vec![i64::MAX; n + 1], vec![false; n + 1]);
        loop {
            used[j0] = true;
            let (i0, mut delta, mut j1) = (p[j0], i64::MAX, 0);
            for j in 1..=n {
                if !used[j] {
                    let cur = c(i0 - 1, j - 1) - u[i0] - v[j];
                    if cur < minv[j] {
                        (minv[j], way[j]) = (cur, j0);
                    }
                    if minv[j] < delta {
                        (delta, j1) = (minv[j], j);
                    }
                }
            }
            for j in 0..=n {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        while j0 != 0 {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
        }
    }
    let total: i64 = (1..=n).map(|j| c(p[j] - 1, j - 1)).sum();
    if total >= INF {
        u32::MAX
    } else {
        total as u32
    }
}

/// The largest sum of disjoint groups' values over subsets of `n` boxes.
fn packing(n: usize, value: &dyn Fn(&[usize]) -> u32, triples: bool) -> u32 {
    let full = (1usize << n) - 1;
    let mut best = vec![0u32; full + 1];
    for mask in 1..=full {
        let a = mask.trailing_zeros() as usize;
        let rest = mask & !(1 << a);
        let mut b = best[rest];
        for x in a + 1..n {
            if rest >> x & 1 == 1 {
                let r2 = rest & !(1 << x);
                b = b.max(best[r2].saturating_add(value(&[a, x])));
                for y in x + 1..n {
                    if triples && r2 >> y & 1 == 1 {
                        b = b.max(best[r2 & !(1 << y)].saturating_add(value(&[a, x, y])));
                    }
                }
            }
        }
        best[mask] = b;
    }
    best[full]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let anywhere = args.len() == 5 && args[4] == "--player-anywhere";
    if args.len() != 4 && !anywhere {
        eprintln!("usage: bound_gaps LEVELS.xsb N SOLUTION.lurd [--player-anywhere]");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("the level file");
    let n: usize = args[2].parse().expect("a level number");
    let lurd = std::fs::read_to_string(&args[3]).expect("the solution file");
    let level = split_collection(&text, &args[1]).into_iter().find(|l| l.index == n).expect("no such level");
    let board = Board::new(&level.parse().expect("a valid level")).expect("a valid board");
    let floor = board.floor_count();
    let ng = board.goals.len();
    let lb = LowerBounds::new(&board, true);
    let mut labels = Labels { floor, flat: false, cache: HashMap::new() };
    let mut tri_labels = Labels { floor, flat: anywhere, cache: HashMap::new() };

    // player-aware lone-box distances: d1[g][x][r], r the player's region of floor \ {x}
    let mut d1: HashMap<(usize, u16, u8), u32> = HashMap::new();
    for (g, &goal) in board.goals.iter().enumerate() {
        for ((boxes, r), d) in game(&board, &mut labels, &[goal]) {
            d1.insert((g, boxes[0], r), d);
        }
    }
    let aware = |labels: &mut Labels, g: usize, x: u16, player: u16| {
        let r = labels.of(&board, &[x])[player as usize];
        d1.get(&(g, x, r)).copied().unwrap_or(u32::MAX)
    };
    let relaxed = |g: usize, x: u16, _: u16| lb.distances.to_goal(g, x);
    let started = std::time::Instant::now();
    let pairs = penalties(&board, &mut labels, 2, &relaxed);
    let small = board.box_count() <= 16;
    let triples = if small { penalties(&board, &mut tri_labels, 3, &relaxed) } else { HashMap::new() };
    let aware_pairs = {
        let mut l2 = Labels { floor, flat: false, cache: HashMap::new() };
        let mut l1 = Labels { floor, flat: false, cache: HashMap::new() };
        let lone = |g: usize, x: u16, player: u16| {
            let r = l1.of(&board, &[x])[player as usize];
            d1.get(&(g, x, r)).copied().unwrap_or(u32::MAX)
        };
        // `lone` borrows its own labels, so the game's are separate
        let cell = std::cell::RefCell::new(lone);
        penalties(&board, &mut l2, 2, &|g, x, p| (cell.borrow_mut())(g, x, p))
    };
    eprintln!("tables in {:.1?}", started.elapsed());

    // the states along the solution
    let (mut boxes, mut player) = (board.start_boxes.clone(), board.start_player);
    let mut states = vec![(boxes.clone(), player)];
    for ch in lurd.chars() {
        let Some(dir) = "urdl".find(ch.to_ascii_lowercase()) else { continue };
        let next = board.neighbour(player, dir);
        if let Some(i) = boxes.iter().position(|&b| b == next) {
            boxes[i] = board.neighbour(next, dir);
            boxes.sort_unstable();
            states.push((boxes.clone(), next));
        }
        player = next;
    }
    let total = states.len() - 1;
    let names =
        ["solver", "exact pairs", "exact pairs+triples", "player-aware matching", "player-aware matching + pairs"];
    let mut gaps = [0u64; 5];
    for (i, (boxes, player)) in states.iter().enumerate() {
        let truth = (total - i) as u32;
        let group = |table: &HashMap<(Vec<u16>, u8), u32>, labels: &mut Labels, members: &[usize]| {
            let sq: Vec<u16> = members.iter().map(|&m| boxes[m]).collect();
            let r = labels.of(&board, &sq)[*player as usize];
            table.get(&(sq, r)).copied().unwrap_or(u32::MAX)
        };
        let m = lb.distances.estimate(boxes, true);
        let cost: Vec<Vec<u32>> =
            boxes.iter().map(|&x| (0..ng).map(|g| aware(&mut labels, g, x, *player)).collect()).collect();
        let m_aware = matching(&cost);
        let cell = std::cell::RefCell::new(&mut labels);
        let tri_cell = std::cell::RefCell::new(&mut tri_labels);
        let (exact2, exact3, aware2) = if small {
            let v = |t: &HashMap<(Vec<u16>, u8), u32>, g: &[usize]| group(t, &mut cell.borrow_mut(), g);
            let v3 = |g: &[usize]| group(&triples, &mut tri_cell.borrow_mut(), g);
            (
                m.saturating_add(packing(boxes.len(), &|g| v(&pairs, g), false)),
                m.saturating_add(packing(boxes.len(), &|g| if g.len() == 2 { v(&pairs, g) } else { v3(g) }, true)),
                m_aware.saturating_add(packing(boxes.len(), &|g| v(&aware_pairs, g), false)),
            )
        } else {
            (0, 0, 0)
        };
        let bounds = [lb.estimate(boxes, *player, true), exact2, exact3, m_aware, aware2];
        for (k, &b) in bounds.iter().enumerate() {
            if b != u32::MAX && b > truth {
                println!("over the truth: {} at push {i}: {b} > {truth}", names[k]);
            }
            gaps[k] += (truth - b.min(truth)) as u64;
        }
        if i % 10 == 0 {
            println!("push {i:4}: true {truth:4}, bounds {bounds:?}");
        }
    }
    println!("level {n}, {total} pushes; summed gaps over its {} states:", total + 1);
    for (name, gap) in names.iter().zip(gaps) {
        println!(
            "  {name:32} {gap}{}",
            if !small && name != &"solver" && !name.ends_with("matching") { " (skipped)" } else { "" }
        );
    }
}
