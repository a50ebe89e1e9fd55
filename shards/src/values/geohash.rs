//! The geohash arithmetic of Redis's GEO commands: a position as a 52-bit score
//! (latitude and longitude bits interleaved, latitude limited to ±85.05112878 as in Web
//! Mercator), the cell a score stands for, a cell's neighbours, the cells that cover a
//! search area, and distances on Redis's sphere. Redis's own algorithm, step for step, so
//! scores, positions, distances and even the order searches find members in are Redis's.

pub const STEP_MAX: u32 = 26;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

/// A range of degrees.
#[derive(Clone, Copy)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

pub const LONGITUDES: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
pub const LATITUDES: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

/// A cell: `step` bits of latitude and of longitude, interleaved.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Hash {
    pub bits: u64,
    pub step: u32,
}

impl Hash {
    /// The scores of the members inside the cell: `min..max`.
    pub fn scores(self) -> (f64, f64) {
        let shift = 52 - self.step * 2;
        (
            (self.bits << shift) as f64,
            ((self.bits + 1) << shift) as f64,
        )
    }
}

/// A cell's bounds.
pub struct Area {
    pub long: Range,
    pub lat: Range,
}

fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The cell of `step` bits holding a position (`None` outside the ranges or ±85.05°).
pub fn encode(long: Range, lat: Range, longitude: f64, latitude: f64, step: u32) -> Option<Hash> {
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat.min || latitude > lat.max || longitude < long.min || longitude > long.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (latitude - lat.min) / (lat.max - lat.min) * scale;
    let long_offset = (longitude - long.min) / (long.max - long.min) * scale;
    Some(Hash {
        bits: spread(lat_offset as u32) | (spread(long_offset as u32) << 1),
        step,
    })
}

pub fn decode(long: Range, lat: Range, hash: Hash) -> Area {
    let (ilat, ilong) = (squash(hash.bits), squash(hash.bits >> 1));
    let scale = (1u64 << hash.step) as f64;
    let at = |r: Range, i: u32| r.min + (f64::from(i) / scale) * (r.max - r.min);
    let upto = |r: Range, i: u32| r.min + ((f64::from(i) + 1.0) / scale) * (r.max - r.min);
    Area {
        long: Range {
            min: at(long, ilong),
            max: upto(long, ilong),
        },
        lat: Range {
            min: at(lat, ilat),
            max: upto(lat, ilat),
        },
    }
}

/// The position a member's score stands for: its cell's centre.
pub fn position(score: f64) -> (f64, f64) {
    let area = decode(
        LONGITUDES,
        LATITUDES,
        Hash {
            bits: score as u64,
            step: STEP_MAX,
        },
    );
    let long = ((area.long.min + area.long.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (long, lat)
}

/// A member's score for a position already checked to be in range.
pub fn score(longitude: f64, latitude: f64) -> f64 {
    let hash = encode(LONGITUDES, LATITUDES, longitude, latitude, STEP_MAX).expect("in range");
    hash.bits as f64
}

/// The 11-character standard geohash (latitude ±90) of a member's position.
pub fn standard_geohash(score: f64) -> String {
    const ALPHABET: &[u8] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (long, lat) = position(score);
    let world = Range {
        min: -90.0,
        max: 90.0,
    };
    let bits = encode(LONGITUDES, world, long, lat, STEP_MAX).map_or(0, |h| h.bits);
    (0..11)
        .map(|i| {
            let index = if i == 10 {
                0
            } else {
                (bits >> (52 - (i + 1) * 5)) & 0x1f
            };
            char::from(ALPHABET[index as usize])
        })
        .collect()
}

/// Longitude bits (odd positions) and latitude bits (even positions) of a hash.
const LONG_BITS: u64 = 0xaaaa_aaaa_aaaa_aaaa;
const LAT_BITS: u64 = 0x5555_5555_5555_5555;

/// The cell one step along `lane` (`LONG_BITS`: east for +1; `LAT_BITS`: north), as
/// Redis's `geohash_move_x`/`_y`: the other lane's bits are set so the carry runs through.
fn moved_along(hash: Hash, d: i8, lane: u64) -> Hash {
    let shift = 64 - hash.step * 2;
    let (mine, rest) = (hash.bits & lane, hash.bits & !lane);
    let zz = !lane >> shift;
    let mine = match d {
        1 => mine.wrapping_add(zz + 1),
        _ => (mine | zz).wrapping_sub(zz + 1),
    } & (lane >> shift);
    Hash {
        bits: mine | rest,
        step: hash.step,
    }
}

fn moved(hash: Hash, dx: i8, dy: i8) -> Hash {
    let hash = if dx == 0 {
        hash
    } else {
        moved_along(hash, dx, LONG_BITS)
    };
    if dy == 0 {
        hash
    } else {
        moved_along(hash, dy, LAT_BITS)
    }
}

/// What a search covers: its centre, and either a radius or a box, in metres.
pub struct Shape {
    pub long: f64,
    pub lat: f64,
    /// Radius, or (width, height).
    pub radius: Option<f64>,
    pub box_size: (f64, f64),
}

fn to_rad(deg: f64) -> f64 {
    deg * (std::f64::consts::PI / 180.0)
}

fn to_deg(rad: f64) -> f64 {
    rad / (std::f64::consts::PI / 180.0)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * (to_rad(lat2) - to_rad(lat1)).abs()
}

/// Redis's haversine distance in metres.
pub fn distance(long1: f64, lat1: f64, long2: f64, lat2: f64) -> f64 {
    let v = ((to_rad(long2) - to_rad(long1)) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (to_rad(lat1), to_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

impl Shape {
    /// The distance to a point when it lies inside the shape.
    pub fn contains(&self, long: f64, lat: f64) -> Option<f64> {
        match self.radius {
            Some(radius) => {
                let d = distance(self.long, self.lat, long, lat);
                (d <= radius).then_some(d)
            }
            None => {
                let (width, height) = self.box_size;
                if lat_distance(lat, self.lat) > height / 2.0 {
                    return None;
                }
                if distance(long, lat, self.long, lat) > width / 2.0 {
                    return None;
                }
                Some(distance(self.long, self.lat, long, lat))
            }
        }
    }

    /// min longitude, min latitude, max longitude, max latitude.
    fn bounds(&self) -> [f64; 4] {
        let (half_w, half_h) = match self.radius {
            Some(r) => (r, r),
            None => (self.box_size.0 / 2.0, self.box_size.1 / 2.0),
        };
        let lat_delta = to_deg(half_h / EARTH_RADIUS);
        let top = to_deg(half_w / EARTH_RADIUS / to_rad(self.lat + lat_delta).cos());
        let bottom = to_deg(half_w / EARTH_RADIUS / to_rad(self.lat - lat_delta).cos());
        let delta = if self.lat < 0.0 { bottom } else { top };
        [
            self.long - delta,
            self.lat - lat_delta,
            self.long + delta,
            self.lat + lat_delta,
        ]
    }

    /// The cells to look in, in Redis's order (centre, N, S, E, W, NE, NW, SE, SW), with
    /// those that cannot hold a match left out.
    pub fn cells(&self) -> Vec<Hash> {
        let bounds = self.bounds();
        let [min_long, min_lat, max_long, max_lat] = bounds;
        let reach = match self.radius {
            Some(r) => r,
            None => ((self.box_size.0 / 2.0).powi(2) + (self.box_size.1 / 2.0).powi(2)).sqrt(),
        };
        let mut step = estimate_step(reach, self.lat);
        let centre_at =
            |step| encode(LONGITUDES, LATITUDES, self.long, self.lat, step).expect("in range");
        let (mut hash, mut n) = (centre_at(step), neighbours(centre_at(step)));
        let area = |h: Hash| decode(LONGITUDES, LATITUDES, h);
        // Near a cell's edge the estimated step can be too fine for the 3 x 3 cells to cover
        // the area: one step coarser then.
        let too_small = area(n[0]).lat.max < max_lat
            || area(n[1]).lat.min > min_lat
            || area(n[2]).long.max < max_long
            || area(n[3]).long.min > min_long;
        if step > 1 && too_small {
            step -= 1;
            hash = centre_at(step);
            n = neighbours(hash);
        }
        let keep = needed(&area(hash), bounds, step);
        let mut cells = vec![hash];
        // As Redis: a neighbour is skipped when it repeats the one processed just before,
        // the centre excepted (huge radii make neighbours repeat).
        let mut last = None;
        for (cell, kept) in n.into_iter().zip(keep) {
            if kept && last != Some(cell) {
                cells.push(cell);
                last = Some(cell);
            }
        }
        cells
    }
}

/// N, S, E, W, NE, NW, SE, SW of a cell.
fn neighbours(hash: Hash) -> [Hash; 8] {
    [
        (0, 1),
        (0, -1),
        (1, 0),
        (-1, 0),
        (1, 1),
        (-1, 1),
        (1, -1),
        (-1, -1),
    ]
    .map(|(dx, dy)| moved(hash, dx, dy))
}

/// Which neighbours (in `neighbours`'s order) can hold a match, given the centre cell and
/// the search's bounds: those beyond a side the centre already reaches past are dropped.
fn needed(centre: &Area, [min_long, min_lat, max_long, max_lat]: [f64; 4], step: u32) -> [bool; 8] {
    let mut keep = [true; 8];
    if step < 2 {
        return keep;
    }
    let mut drop = |which: [usize; 3]| which.into_iter().for_each(|i| keep[i] = false);
    if centre.lat.min < min_lat {
        drop([1, 7, 6]);
    }
    if centre.lat.max > max_lat {
        drop([0, 4, 5]);
    }
    if centre.long.min < min_long {
        drop([3, 7, 5]);
    }
    if centre.long.max > max_long {
        drop([2, 6, 4]);
    }
    keep
}

fn estimate_step(mut range: f64, lat: f64) -> u32 {
    if range == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, STEP_MAX as i32) as u32
}

/// Redis's "human" long double: 17 decimals, trailing zeros and a bare dot dropped.
pub fn human(value: f64) -> String {
    let text = format!("{value:.17}");
    let text = text.trim_end_matches('0');
    text.trim_end_matches('.').to_string()
}

/// A distance as Redis writes it: rounded to 4 decimals (half to even, as `llrint`).
pub fn fixed4(value: f64) -> String {
    let scaled = (value * 10_000.0).round_ties_even() as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let n = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", n / 10_000, n % 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_distances_are_redis_s() {
        // Palermo and Catania, Redis's GEOADD documentation example.
        let palermo = score(13.361389, 38.115556);
        let catania = score(15.087269, 37.502669);
        assert_eq!(palermo, 3479099956230698.0);
        assert_eq!(catania, 3479447370796909.0);
        let (long, lat) = position(palermo);
        assert_eq!(human(long), "13.36138933897018433");
        assert_eq!(human(lat), "38.11555639549629859");
        let (l2, a2) = position(catania);
        assert_eq!(fixed4(distance(long, lat, l2, a2)), "166274.1516");
        assert_eq!(standard_geohash(palermo), "sqc8b49rny0");
        assert_eq!(fixed4(0.0), "0.0000");
    }
}
