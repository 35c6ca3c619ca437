//! PostgreSQL heap pages, parsed from their bytes: enough to count what
//! `select count(*)` sees and to sum the first column when it is an `int4`,
//! with every structure checked so that a file that is not a heap relation
//! gets an error naming the block, never a made-up count.
//!
//! # The page format (PostgreSQL 15, `bufpage.h`, `itemid.h`, `htup_details.h`)
//!
//! A relation is a sequence of 8 KiB blocks ([`BLCKSZ`]), stored in segment
//! files of 1 GiB ([`RELSEG_BLOCKS`] blocks): `PATH`, `PATH.1`, `PATH.2`, …
//! Integers are in the machine's byte order; this module reads little-endian
//! (x86-64, aarch64) and assumes a 64-bit build (`MAXALIGN` 8).
//!
//! ```text
//! PageHeaderData (24 bytes)                        ItemIdData (4 bytes, one per line pointer)
//!  0  pd_lsn              u32 xlogid, u32 xrecoff   bits  0..15  lp_off   (byte offset of the tuple;
//!  8  pd_checksum         u16                                              redirect: target offset number)
//! 10  pd_flags            u16 (HAS_FREE_LINES 1,    bits 15..17  lp_flags (0 unused, 1 normal,
//!                              PAGE_FULL 2,                                2 redirect, 3 dead)
//!                              ALL_VISIBLE 4)       bits 17..32  lp_len   (tuple length in bytes)
//! 12  pd_lower            u16  end of the line pointers
//! 14  pd_upper            u16  start of the tuples
//! 16  pd_special          u16  start of the special space (8192 on a heap page: none)
//! 18  pd_pagesize_version u16  page size | layout version (8192 | 4)
//! 20  pd_prune_xid        u32
//! 24  line pointers …  pd_lower … free space … pd_upper  tuples …  pd_special
//!
//! HeapTupleHeaderData (23 bytes, then the null bitmap, then data at t_hoff)
//!  0  t_xmin       u32   inserting transaction
//!  4  t_xmax       u32   deleting or locking transaction (0: none)
//!  8  t_cid/t_xvac u32
//! 12  t_ctid       6 bytes: block (u16 hi, u16 lo), offset u16
//! 18  t_infomask2  u16   natts = & 0x07FF; KEYS_UPDATED 0x2000, HOT_UPDATED 0x4000, ONLY_TUPLE 0x8000
//! 20  t_infomask   u16   HASNULL 0x0001, XMAX_LOCK_ONLY 0x0080, XMIN_COMMITTED 0x0100,
//!                        XMIN_INVALID 0x0200 (both: frozen), XMAX_COMMITTED 0x0400,
//!                        XMAX_INVALID 0x0800, XMAX_IS_MULTI 0x1000, …
//! 22  t_hoff       u8    offset of the data (MAXALIGNed)
//! 23  t_bits       null bitmap when HASNULL: bit n set = attribute n+1 is NOT null
//! ```
//!
//! An all-zero page (`pd_upper == 0` and every byte zero) is a *new* page,
//! valid and empty: PostgreSQL leaves them when a relation is extended and
//! the extending transaction does not write the page.
//!
//! # What is counted, and what that assumes
//!
//! pagestream cannot see the commit log (`pg_xact`), the multixact files or
//! the catalog, so it counts what `count(*)` sees **on a table with no
//! transaction in progress that has been vacuumed (or whose tuples have been
//! read once since their transactions ended) and checkpointed, with the
//! server stopped**. For each line pointer:
//!
//! - `LP_UNUSED`, `LP_DEAD`: no tuple.
//! - `LP_REDIRECT`: no tuple: it points to the live member of a HOT chain
//!   (a heap-only tuple on the same page), which is counted through its own
//!   `LP_NORMAL` line pointer.
//! - `LP_NORMAL`: a tuple version, counted when
//!   - its inserter is not known to have aborted: `HEAP_XMIN_INVALID` set
//!     *without* `HEAP_XMIN_COMMITTED` means aborted; any other state counts
//!     as committed. Hint bits may be unset on a table no one has read since
//!     the insert; with no transaction in progress such an inserter has
//!     ended, and it committed unless it aborted — and the tuples of an
//!     aborted inserter are removed by vacuum or hinted `XMIN_INVALID` by
//!     the first reader. A **frozen** tuple has both `XMIN_COMMITTED` and
//!     `XMIN_INVALID` set (`HEAP_XMIN_FROZEN`, PostgreSQL ≥ 9.4; `vacuum
//!     freeze` writes it; earlier versions wrote `t_xmin = 2`,
//!     `FrozenTransactionId`): its insert is visible to every transaction.
//!     A `t_xmin` of 0 (`InvalidTransactionId`) without `XMIN_COMMITTED`
//!     is a speculative insertion (`INSERT … ON CONFLICT`) killed by its
//!     own transaction, which sets `t_xmin` to 0 to make it dead to
//!     everyone: not counted (PostgreSQL treats an invalid xid as aborted);
//!     and
//!   - it is not deleted: `t_xmax` is 0, or `HEAP_XMAX_INVALID` is set (no
//!     deleter, or the deleter aborted and a reader hinted it), or `t_xmax`
//!     only locked the tuple (`HEAP_XMAX_LOCK_ONLY`, or an exclusive lock
//!     bit without `XMAX_IS_MULTI`: `HEAP_XMAX_IS_LOCKED_ONLY`). Any other
//!     `t_xmax` — a plain transaction id or a multixact that is not lock-only
//!     — is taken as a committed delete or update: with no transaction in
//!     progress it ended, and if it aborted, vacuum (which looks at every
//!     tuple) has set `XMAX_INVALID`. This is the assumption that needs the
//!     table vacuumed: a delete that aborted after the last vacuum and that
//!     no reader has seen since would be missed.
//!
//!   The old version of a HOT update keeps its committed `t_xmax` (and
//!   `HEAP_HOT_UPDATED`), so it is not counted; the new version
//!   (`HEAP_ONLY_TUPLE`) is. After pruning, the old version's line pointer
//!   becomes a redirect. Pre-9.0 `VACUUM FULL` moves (`HEAP_MOVED_OFF` /
//!   `HEAP_MOVED_IN`, judged by `t_xvac`) are not interpreted: only a
//!   cluster `pg_upgrade`d from before 9.0 can hold them.
//!
//! # The first column
//!
//! When asked to, [`count_page`] sums the first attribute as an `int4`:
//! NULL when `natts` is 0 (a tuple written before the column existed: its
//! value is the column's missing value, which lives in the catalog — these
//! are reported as NULL) or when the null bitmap says so; otherwise the 4
//! bytes at `t_hoff` (an `int4` is 4-aligned, and `t_hoff` is MAXALIGNed,
//! so the first attribute starts exactly there). The heap does not say
//! whether the column *is* an `int4`: the caller does. "First" means
//! attribute number 1 as stored: if that column was dropped
//! (`alter table … drop column`), SQL's first column is another one, and
//! if a table got its first column from `alter table … add column … default
//! X` after rows were written, those rows' value is `X` in the catalog
//! (`attmissingval`) but NULL here.

use std::fmt;

/// PostgreSQL's block size (the default `BLCKSZ`; the only one supported).
pub const BLCKSZ: usize = 8192;

/// Blocks in one segment file (`RELSEG_SIZE`: 1 GiB of 8 KiB blocks).
pub const RELSEG_BLOCKS: u64 = 131_072;

/// `SizeOfPageHeaderData`.
pub const PAGE_HEADER_SIZE: usize = 24;

/// `PG_PAGE_LAYOUT_VERSION` (PostgreSQL 8.3 and later).
pub const LAYOUT_VERSION: u8 = 4;

/// `SizeofHeapTupleHeader`: the fixed part of a tuple header.
pub const TUPLE_HEADER_SIZE: usize = 23;

/// `MAXIMUM_ALIGNOF` on 64-bit builds.
const MAXALIGN: usize = 8;

/// `pd_flags` bits: `PD_HAS_FREE_LINES | PD_PAGE_FULL | PD_ALL_VISIBLE`.
pub const PD_VALID_FLAG_BITS: u16 = 0x0007;

/// `t_infomask` bits (`htup_details.h`).
pub mod infomask {
    /// Has null attribute(s): a null bitmap follows the header.
    pub const HEAP_HASNULL: u16 = 0x0001;
    /// Has variable-width attribute(s).
    pub const HEAP_HASVARWIDTH: u16 = 0x0002;
    /// xmax is a key-share locker.
    pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
    /// xmax is an exclusive locker.
    pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
    /// xmax, if valid, is only a locker.
    pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
    /// The lock bits.
    pub const HEAP_LOCK_MASK: u16 = 0x0050;
    /// t_xmin committed (hint).
    pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
    /// t_xmin invalid or aborted (hint).
    pub const HEAP_XMIN_INVALID: u16 = 0x0200;
    /// Both: the tuple is frozen.
    pub const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
    /// t_xmax committed (hint).
    pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
    /// t_xmax invalid or aborted (hint).
    pub const HEAP_XMAX_INVALID: u16 = 0x0800;
    /// t_xmax is a multixact.
    pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
    /// This is an updated version of a row.
    pub const HEAP_UPDATED: u16 = 0x2000;
}

/// `t_infomask2` bits.
pub mod infomask2 {
    /// The number of attributes.
    pub const HEAP_NATTS_MASK: u16 = 0x07FF;
    /// A key column was updated or the tuple deleted.
    pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
    /// The tuple was HOT-updated (its successor is on this page).
    pub const HEAP_HOT_UPDATED: u16 = 0x4000;
    /// A heap-only tuple (the new version of a HOT update).
    pub const HEAP_ONLY_TUPLE: u16 = 0x8000;
}

#[inline]
fn u16_at(p: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([p[off], p[off + 1]])
}

#[inline]
fn u32_at(p: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([p[off], p[off + 1], p[off + 2], p[off + 3]])
}

/// A page header (`PageHeaderData`), as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// `pd_lsn` as one number (`xlogid << 32 | xrecoff`).
    pub lsn: u64,
    /// `pd_checksum` (0 unless the cluster has data checksums).
    pub checksum: u16,
    /// `pd_flags`.
    pub flags: u16,
    /// `pd_lower`: end of the line pointer array.
    pub lower: u16,
    /// `pd_upper`: start of the tuples.
    pub upper: u16,
    /// `pd_special`: start of the special space.
    pub special: u16,
    /// `pd_pagesize_version`.
    pub pagesize_version: u16,
    /// `pd_prune_xid`.
    pub prune_xid: u32,
}

impl PageHeader {
    /// Reads the header of `page` (at least [`PAGE_HEADER_SIZE`] bytes).
    pub fn parse(page: &[u8]) -> PageHeader {
        PageHeader {
            lsn: (u64::from(u32_at(page, 0)) << 32) | u64::from(u32_at(page, 4)),
            checksum: u16_at(page, 8),
            flags: u16_at(page, 10),
            lower: u16_at(page, 12),
            upper: u16_at(page, 14),
            special: u16_at(page, 16),
            pagesize_version: u16_at(page, 18),
            prune_xid: u32_at(page, 20),
        }
    }

    /// The page size it states (`pd_pagesize_version & 0xFF00`).
    pub fn page_size(&self) -> usize {
        usize::from(self.pagesize_version & 0xFF00)
    }

    /// The layout version it states (`pd_pagesize_version & 0x00FF`).
    pub fn layout_version(&self) -> u8 {
        (self.pagesize_version & 0x00FF) as u8
    }

    /// The number of line pointers (`PageGetMaxOffsetNumber`).
    pub fn line_pointers(&self) -> usize {
        usize::from(self.lower).saturating_sub(PAGE_HEADER_SIZE) / 4
    }
}

/// `lp_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LpFlags {
    /// `LP_UNUSED`: free; `lp_off` and `lp_len` are 0.
    Unused,
    /// `LP_NORMAL`: a tuple at `lp_off`, `lp_len` bytes.
    Normal,
    /// `LP_REDIRECT`: a HOT chain's root; `lp_off` is the offset number of
    /// its live member.
    Redirect,
    /// `LP_DEAD`: a dead tuple, usually without storage.
    Dead,
}

/// A line pointer (`ItemIdData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePointer {
    /// `lp_off` (15 bits).
    pub off: u16,
    /// `lp_flags` (2 bits).
    pub flags: LpFlags,
    /// `lp_len` (15 bits).
    pub len: u16,
}

impl LinePointer {
    /// Decodes the 32-bit word (`lp_off:15, lp_flags:2, lp_len:15`, from the
    /// least significant bit).
    pub fn from_raw(w: u32) -> LinePointer {
        LinePointer {
            off: (w & 0x7FFF) as u16,
            flags: match (w >> 15) & 3 {
                0 => LpFlags::Unused,
                1 => LpFlags::Normal,
                2 => LpFlags::Redirect,
                _ => LpFlags::Dead,
            },
            len: (w >> 17) as u16,
        }
    }

    /// Encodes it (the inverse of [`from_raw`](Self::from_raw)).
    pub fn to_raw(self) -> u32 {
        let f = match self.flags {
            LpFlags::Unused => 0,
            LpFlags::Normal => 1,
            LpFlags::Redirect => 2,
            LpFlags::Dead => 3,
        };
        u32::from(self.off & 0x7FFF) | (f << 15) | (u32::from(self.len & 0x7FFF) << 17)
    }
}

/// A tuple header (`HeapTupleHeaderData`, fixed part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TupleHeader {
    /// `t_xmin`.
    pub xmin: u32,
    /// `t_xmax`.
    pub xmax: u32,
    /// `t_cid` or `t_xvac`.
    pub cid_or_xvac: u32,
    /// `t_ctid`: block and offset number of this version or its successor.
    pub ctid: (u32, u16),
    /// `t_infomask2`.
    pub infomask2: u16,
    /// `t_infomask`.
    pub infomask: u16,
    /// `t_hoff`.
    pub hoff: u8,
}

impl TupleHeader {
    /// Reads the header at the start of `tuple` (at least
    /// [`TUPLE_HEADER_SIZE`] bytes).
    pub fn parse(tuple: &[u8]) -> TupleHeader {
        TupleHeader {
            xmin: u32_at(tuple, 0),
            xmax: u32_at(tuple, 4),
            cid_or_xvac: u32_at(tuple, 8),
            ctid: (
                (u32::from(u16_at(tuple, 12)) << 16) | u32::from(u16_at(tuple, 14)),
                u16_at(tuple, 16),
            ),
            infomask2: u16_at(tuple, 18),
            infomask: u16_at(tuple, 20),
            hoff: tuple[22],
        }
    }

    /// The number of attributes.
    pub fn natts(&self) -> usize {
        usize::from(self.infomask2 & infomask2::HEAP_NATTS_MASK)
    }

    /// Whether a null bitmap follows the header.
    pub fn has_nulls(&self) -> bool {
        self.infomask & infomask::HEAP_HASNULL != 0
    }

    /// Frozen: `XMIN_COMMITTED | XMIN_INVALID`.
    pub fn is_frozen(&self) -> bool {
        self.infomask & infomask::HEAP_XMIN_FROZEN == infomask::HEAP_XMIN_FROZEN
    }

    /// The inserter is known to have aborted: `XMIN_INVALID` without
    /// `XMIN_COMMITTED`, or `t_xmin` 0 (a killed speculative insertion)
    /// without `XMIN_COMMITTED`.
    pub fn xmin_aborted(&self) -> bool {
        let hints = self.infomask & infomask::HEAP_XMIN_FROZEN;
        hints == infomask::HEAP_XMIN_INVALID || (self.xmin == 0 && hints == 0)
    }

    /// `HEAP_XMAX_IS_LOCKED_ONLY`: `t_xmax` only locked the tuple.
    pub fn xmax_lock_only(&self) -> bool {
        self.infomask & infomask::HEAP_XMAX_LOCK_ONLY != 0
            || self.infomask & (infomask::HEAP_XMAX_IS_MULTI | infomask::HEAP_LOCK_MASK)
                == infomask::HEAP_XMAX_EXCL_LOCK
    }

    /// Deleted or updated by a transaction taken as committed (see the
    /// [module docs](self)).
    pub fn is_deleted(&self) -> bool {
        self.xmax != 0 && self.infomask & infomask::HEAP_XMAX_INVALID == 0 && !self.xmax_lock_only()
    }

    /// Visible to `count(*)` under the [module's assumptions](self).
    pub fn is_visible(&self) -> bool {
        !self.xmin_aborted() && !self.is_deleted()
    }

    /// The old version of a HOT update.
    pub fn is_hot_updated(&self) -> bool {
        self.infomask2 & infomask2::HEAP_HOT_UPDATED != 0
    }

    /// A heap-only tuple (the new version of a HOT update).
    pub fn is_heap_only(&self) -> bool {
        self.infomask2 & infomask2::HEAP_ONLY_TUPLE != 0
    }
}

/// What is wrong with a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// The page is not [`BLCKSZ`] bytes long (a short read or a file whose
    /// size is not a multiple of 8 KiB).
    PageLength(usize),
    /// `pd_upper == 0` (a new page) but not every byte is zero.
    NewPageNotZero,
    /// `pd_pagesize_version` does not say 8192 bytes.
    PageSize(u16),
    /// `pd_pagesize_version` does not say layout version 4.
    LayoutVersion(u16),
    /// `pd_special` is not 8192: the page has special space, as index pages
    /// do.
    SpecialSpace(u16),
    /// Flags outside `PD_VALID_FLAG_BITS`.
    Flags(u16),
    /// `pd_lower`, `pd_upper`, `pd_special` out of order or out of the page.
    Bounds {
        /// `pd_lower`.
        lower: u16,
        /// `pd_upper`.
        upper: u16,
        /// `pd_special`.
        special: u16,
    },
    /// A line pointer is wrong: its offset number (from 1) and why.
    LinePointer {
        /// Offset number (1-based, as in `ctid`).
        offnum: usize,
        /// What is wrong.
        why: String,
    },
    /// A tuple header is wrong.
    Tuple {
        /// Offset number.
        offnum: usize,
        /// What is wrong.
        why: String,
    },
}

/// A page that is not a valid heap page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageError {
    /// The block number in the relation.
    pub block: u64,
    /// What is wrong.
    pub corruption: Corruption,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.block;
        match &self.corruption {
            Corruption::SpecialSpace(s) => write!(
                f,
                "not a heap relation: block {b} has special space (index?): pd_special {s}, a heap page has 8192"
            ),
            Corruption::PageLength(n) => {
                write!(f, "block {b} is {n} bytes, not a whole 8192-byte page")
            }
            Corruption::NewPageNotZero => write!(
                f,
                "not a heap page: block {b} has pd_upper 0 (a new page) but is not all zeros"
            ),
            Corruption::PageSize(v) => write!(
                f,
                "not a PostgreSQL page of 8 KiB: block {b} has pd_pagesize_version {v:#06x} \
                 (page size {}, expected 8192)",
                v & 0xFF00
            ),
            Corruption::LayoutVersion(v) => write!(
                f,
                "not a PostgreSQL page: block {b} has page layout version {} (expected 4)",
                v & 0xFF
            ),
            Corruption::Flags(fl) => {
                write!(f, "corrupt heap page: block {b} has invalid pd_flags {fl:#06x}")
            }
            Corruption::Bounds {
                lower,
                upper,
                special,
            } => write!(
                f,
                "corrupt heap page: block {b} has pd_lower {lower}, pd_upper {upper}, \
                 pd_special {special} (need 24 ≤ lower ≤ upper ≤ special = 8192, lower - 24 a multiple of 4)"
            ),
            Corruption::LinePointer { offnum, why } => write!(
                f,
                "corrupt heap page: block {b}, line pointer {offnum}: {why}"
            ),
            Corruption::Tuple { offnum, why } => {
                write!(f, "corrupt heap tuple ({b},{offnum}): {why}")
            }
        }
    }
}

impl std::error::Error for PageError {}

/// What a scan has counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pages scanned.
    pub pages: u64,
    /// Of those, new (all-zero) pages.
    pub new_pages: u64,
    /// Visible tuples: what `count(*)` returns.
    pub tuples: u64,
    /// Sum of the first column over visible tuples where it is not NULL
    /// (when summing). 128 bits: it cannot overflow (PostgreSQL's
    /// `sum(int4)` is a `bigint` and fails with "bigint out of range"
    /// where this goes past `i64`).
    pub sum: i128,
    /// Visible tuples whose first column is not NULL (when summing).
    pub non_null: u64,
    /// `LP_NORMAL` tuples not counted (deleted, updated, or aborted
    /// inserts).
    pub invisible: u64,
    /// `LP_REDIRECT` line pointers.
    pub redirects: u64,
    /// `LP_DEAD` line pointers.
    pub dead: u64,
    /// `LP_UNUSED` line pointers.
    pub unused: u64,
}

impl Counts {
    /// `sum(first column)` as SQL sees it: `None` (NULL) when no visible
    /// tuple has a non-NULL first column.
    pub fn sum_value(&self) -> Option<i128> {
        (self.non_null > 0).then_some(self.sum)
    }

    /// Adds another scan's counts (of other pages).
    pub fn merge(&mut self, o: &Counts) {
        self.pages += o.pages;
        self.new_pages += o.new_pages;
        self.tuples += o.tuples;
        self.sum += o.sum;
        self.non_null += o.non_null;
        self.invisible += o.invisible;
        self.redirects += o.redirects;
        self.dead += o.dead;
        self.unused += o.unused;
    }
}

/// The order [`count_page_in`] visits a page's line pointers in. The
/// answer is the same; the memory access pattern is not (seed 002:
/// access order mattered more than prefetching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TupleOrder {
    /// Offset number 1, 2, …: line pointers ascending, tuples (which
    /// PostgreSQL places from the end of the page downwards) descending in
    /// memory.
    #[default]
    LinePointer,
    /// Offset number n, n − 1, …: tuples ascending in memory on a page
    /// filled by inserts.
    Reverse,
}

/// Checks block `block`'s `page` (8192 bytes) and adds what it holds to
/// `counts`; with `sum_int4`, also sums the first column as an `int4` (see
/// the [module docs](self)). On error `counts` is left unchanged.
/// Visits line pointers in [`TupleOrder::LinePointer`] order.
pub fn count_page(
    block: u64,
    page: &[u8],
    sum_int4: bool,
    counts: &mut Counts,
) -> Result<(), PageError> {
    count_page_in(block, page, sum_int4, TupleOrder::default(), counts)
}

/// [`count_page`], visiting the line pointers in `order`.
pub fn count_page_in(
    block: u64,
    page: &[u8],
    sum_int4: bool,
    order: TupleOrder,
    counts: &mut Counts,
) -> Result<(), PageError> {
    let err = |corruption| PageError { block, corruption };
    if page.len() != BLCKSZ {
        return Err(err(Corruption::PageLength(page.len())));
    }
    let h = PageHeader::parse(page);
    if h.upper == 0 {
        // PageIsNew: valid only if all zero.
        if page.iter().any(|&b| b != 0) {
            return Err(err(Corruption::NewPageNotZero));
        }
        counts.pages += 1;
        counts.new_pages += 1;
        return Ok(());
    }
    if h.page_size() != BLCKSZ {
        return Err(err(Corruption::PageSize(h.pagesize_version)));
    }
    if h.layout_version() != LAYOUT_VERSION {
        return Err(err(Corruption::LayoutVersion(h.pagesize_version)));
    }
    if usize::from(h.special) != BLCKSZ {
        return Err(err(Corruption::SpecialSpace(h.special)));
    }
    if h.flags & !PD_VALID_FLAG_BITS != 0 {
        return Err(err(Corruption::Flags(h.flags)));
    }
    let (lower, upper) = (usize::from(h.lower), usize::from(h.upper));
    if lower < PAGE_HEADER_SIZE
        || lower > upper
        || upper > BLCKSZ
        || (lower - PAGE_HEADER_SIZE) % 4 != 0
    {
        return Err(err(Corruption::Bounds {
            lower: h.lower,
            upper: h.upper,
            special: h.special,
        }));
    }
    let nlp = h.line_pointers();
    let lp_at = |i: usize| LinePointer::from_raw(u32_at(page, PAGE_HEADER_SIZE + 4 * i));
    let mut c = Counts {
        pages: 1,
        ..Counts::default()
    };
    for k in 0..nlp {
        let i = match order {
            TupleOrder::LinePointer => k,
            TupleOrder::Reverse => nlp - 1 - k,
        };
        let offnum = i + 1;
        let lp = lp_at(i);
        let bad_lp = |why: String| err(Corruption::LinePointer { offnum, why });
        let bad_tuple = |why: String| err(Corruption::Tuple { offnum, why });
        let (off, len) = (usize::from(lp.off), usize::from(lp.len));
        match lp.flags {
            LpFlags::Unused => {
                if off != 0 || len != 0 {
                    return Err(bad_lp(format!(
                        "unused, with lp_off {off} and lp_len {len} (both should be 0)"
                    )));
                }
                c.unused += 1;
            }
            LpFlags::Redirect => {
                if len != 0 {
                    return Err(bad_lp(format!("redirect with lp_len {len} (should be 0)")));
                }
                if off == 0 || off > nlp || off == offnum {
                    return Err(bad_lp(format!(
                        "redirect to offset {off}, outside 1..={nlp} or to itself"
                    )));
                }
                let target = lp_at(off - 1);
                if target.flags != LpFlags::Normal {
                    return Err(bad_lp(format!(
                        "redirect to offset {off}, which is {:?}, not a tuple",
                        target.flags
                    )));
                }
                c.redirects += 1;
            }
            LpFlags::Dead => {
                if len != 0 && (off < upper || off + len > BLCKSZ) {
                    return Err(bad_lp(format!(
                        "dead, with storage at {off}..{} outside the tuple space {upper}..8192",
                        off + len
                    )));
                }
                c.dead += 1;
            }
            LpFlags::Normal => {
                if len < TUPLE_HEADER_SIZE {
                    return Err(bad_lp(format!(
                        "tuple length {len} is shorter than a tuple header ({TUPLE_HEADER_SIZE})"
                    )));
                }
                if off < upper || off + len > BLCKSZ {
                    return Err(bad_lp(format!(
                        "tuple at {off}..{} is outside the tuple space {upper}..8192",
                        off + len
                    )));
                }
                if off % MAXALIGN != 0 {
                    return Err(bad_lp(format!("tuple offset {off} is not 8-aligned")));
                }
                let tuple = &page[off..off + len];
                let t = TupleHeader::parse(tuple);
                let hoff = usize::from(t.hoff);
                let bitmap = if t.has_nulls() {
                    t.natts().div_ceil(8)
                } else {
                    0
                };
                if hoff < TUPLE_HEADER_SIZE + bitmap || hoff % MAXALIGN != 0 || hoff > len {
                    return Err(bad_tuple(format!(
                        "t_hoff {hoff} is not an 8-aligned offset from {} to the tuple length {len} \
                         ({} attributes{})",
                        TUPLE_HEADER_SIZE + bitmap,
                        t.natts(),
                        if t.has_nulls() { ", with nulls" } else { "" }
                    )));
                }
                if !t.is_visible() {
                    c.invisible += 1;
                    continue;
                }
                c.tuples += 1;
                if sum_int4 {
                    let null =
                        t.natts() == 0 || (t.has_nulls() && tuple[TUPLE_HEADER_SIZE] & 1 == 0);
                    if !null {
                        let Some(v) = tuple.get(hoff..hoff + 4) else {
                            return Err(bad_tuple(format!(
                                "the first column is not an int4: the data is {} bytes",
                                len - hoff
                            )));
                        };
                        let v = i32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                        c.sum += i128::from(v);
                        c.non_null += 1;
                    }
                }
            }
        }
    }
    if c.redirects > 0 {
        check_hot_chains(block, page)?;
    }
    counts.merge(&c);
    Ok(())
}

/// Checks that every redirect's target is a heap-only tuple (the live end
/// of a HOT chain). [`count_page`] calls it for pages with redirects, after
/// checking that each target is an `LP_NORMAL` tuple within the page.
pub fn check_hot_chains(block: u64, page: &[u8]) -> Result<(), PageError> {
    let h = PageHeader::parse(page);
    if h.upper == 0 || page.len() != BLCKSZ {
        return Ok(());
    }
    let nlp = h.line_pointers().min((BLCKSZ - PAGE_HEADER_SIZE) / 4);
    let lp_at = |i: usize| LinePointer::from_raw(u32_at(page, PAGE_HEADER_SIZE + 4 * i));
    for i in 0..nlp {
        let lp = lp_at(i);
        if lp.flags != LpFlags::Redirect || lp.off == 0 || usize::from(lp.off) > nlp {
            continue;
        }
        let target = lp_at(usize::from(lp.off) - 1);
        let (off, len) = (usize::from(target.off), usize::from(target.len));
        if target.flags != LpFlags::Normal || len < TUPLE_HEADER_SIZE || off + len > BLCKSZ {
            continue;
        }
        if !TupleHeader::parse(&page[off..]).is_heap_only() {
            return Err(PageError {
                block,
                corruption: Corruption::LinePointer {
                    offnum: i + 1,
                    why: format!(
                        "redirect to offset {}, which is not a heap-only tuple",
                        lp.off
                    ),
                },
            });
        }
    }
    Ok(())
}

/// Builds heap pages byte by byte, for the tests.
#[derive(Debug, Clone)]
pub struct PageBuilder {
    page: Vec<u8>,
    lps: Vec<LinePointer>,
    upper: usize,
}

impl Default for PageBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// A tuple to put on a built page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TupleSpec {
    /// `t_xmin`.
    pub xmin: u32,
    /// `t_xmax`.
    pub xmax: u32,
    /// `t_infomask` (`HEAP_HASNULL` is set by the builder from `values`).
    pub infomask: u16,
    /// `t_infomask2` flags (`natts` is set from `values`).
    pub infomask2: u16,
    /// The attributes: `Some(int4)` or `None` for NULL.
    pub values: Vec<Option<i32>>,
}

impl TupleSpec {
    /// A committed, never deleted tuple with `values` as `int4`s.
    pub fn live(values: &[Option<i32>]) -> TupleSpec {
        TupleSpec {
            xmin: 1000,
            xmax: 0,
            infomask: infomask::HEAP_XMIN_COMMITTED | infomask::HEAP_XMAX_INVALID,
            infomask2: 0,
            values: values.to_vec(),
        }
    }
}

impl PageBuilder {
    /// An empty initialized heap page (`PageInit`: lower 24, upper and
    /// special 8192).
    pub fn new() -> PageBuilder {
        PageBuilder {
            page: vec![0; BLCKSZ],
            lps: Vec::new(),
            upper: BLCKSZ,
        }
    }

    /// Adds a line pointer as given; returns its offset number.
    pub fn line_pointer(&mut self, lp: LinePointer) -> usize {
        self.lps.push(lp);
        self.lps.len()
    }

    /// Stores `spec` as a tuple with an `LP_NORMAL` line pointer; returns
    /// its offset number.
    pub fn tuple(&mut self, spec: &TupleSpec) -> usize {
        let natts = spec.values.len();
        let has_nulls = spec.values.iter().any(Option::is_none);
        let bitmap = if has_nulls { natts.div_ceil(8) } else { 0 };
        let hoff = (TUPLE_HEADER_SIZE + bitmap).next_multiple_of(MAXALIGN);
        let mut t = vec![0u8; hoff];
        t[0..4].copy_from_slice(&spec.xmin.to_le_bytes());
        t[4..8].copy_from_slice(&spec.xmax.to_le_bytes());
        let offnum = self.lps.len() as u16 + 1;
        t[16..18].copy_from_slice(&offnum.to_le_bytes());
        let im2 = (spec.infomask2 & !infomask2::HEAP_NATTS_MASK) | natts as u16;
        t[18..20].copy_from_slice(&im2.to_le_bytes());
        let im = spec.infomask | if has_nulls { infomask::HEAP_HASNULL } else { 0 };
        t[20..22].copy_from_slice(&im.to_le_bytes());
        t[22] = hoff as u8;
        for (i, v) in spec.values.iter().enumerate() {
            if v.is_some() && has_nulls {
                t[TUPLE_HEADER_SIZE + i / 8] |= 1 << (i % 8);
            }
            if let Some(v) = v {
                t.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.raw_tuple(&t)
    }

    /// Stores `bytes` (a whole tuple, header included) with an `LP_NORMAL`
    /// line pointer; returns its offset number.
    pub fn raw_tuple(&mut self, bytes: &[u8]) -> usize {
        let off = (self.upper - bytes.len()) & !(MAXALIGN - 1);
        self.page[off..off + bytes.len()].copy_from_slice(bytes);
        self.upper = off;
        self.line_pointer(LinePointer {
            off: off as u16,
            flags: LpFlags::Normal,
            len: bytes.len() as u16,
        })
    }

    /// The page's bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut p = self.page.clone();
        let lower = PAGE_HEADER_SIZE + 4 * self.lps.len();
        p[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
        p[14..16].copy_from_slice(&(self.upper as u16).to_le_bytes());
        p[16..18].copy_from_slice(&(BLCKSZ as u16).to_le_bytes());
        p[18..20].copy_from_slice(&(BLCKSZ as u16 | u16::from(LAYOUT_VERSION)).to_le_bytes());
        for (i, lp) in self.lps.iter().enumerate() {
            let at = PAGE_HEADER_SIZE + 4 * i;
            p[at..at + 4].copy_from_slice(&lp.to_raw().to_le_bytes());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::infomask::*;
    use super::infomask2::*;
    use super::*;

    /// Counts `page` as block 7, in line-pointer order; the reverse order
    /// must agree (the same counts, or an error too).
    fn count(page: &[u8]) -> Result<Counts, PageError> {
        let mut c = Counts::default();
        let mut r = Counts::default();
        let reverse = count_page_in(7, page, true, TupleOrder::Reverse, &mut r);
        let forward = count_page(7, page, true, &mut c);
        assert_eq!(forward.is_ok(), reverse.is_ok(), "{forward:?} {reverse:?}");
        forward?;
        assert_eq!(c, r, "the orders disagree");
        Ok(c)
    }

    fn corruption(page: &[u8]) -> Corruption {
        let e = count(page).unwrap_err();
        assert_eq!(e.block, 7);
        e.corruption
    }

    fn set_u16(p: &mut [u8], at: usize, v: u16) {
        p[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn line_pointer_bits() {
        // lp_off 8144, LP_NORMAL, lp_len 48 as a real page stores it.
        let lp = LinePointer::from_raw(0x0060_9FD0);
        assert_eq!(
            lp,
            LinePointer {
                off: 0x1FD0,
                flags: LpFlags::Normal,
                len: 48
            }
        );
        assert_eq!(lp.to_raw(), 0x0060_9FD0);
        for flags in [
            LpFlags::Unused,
            LpFlags::Normal,
            LpFlags::Redirect,
            LpFlags::Dead,
        ] {
            let lp = LinePointer {
                off: 0x7FFF,
                flags,
                len: 0x7FFF,
            };
            assert_eq!(LinePointer::from_raw(lp.to_raw()), lp);
        }
    }

    #[test]
    fn new_and_empty_pages_are_valid_and_empty() {
        assert_eq!(
            count(&[0u8; BLCKSZ]).unwrap(),
            Counts {
                pages: 1,
                new_pages: 1,
                ..Counts::default()
            }
        );
        let c = count(&PageBuilder::new().build()).unwrap();
        assert_eq!((c.pages, c.new_pages, c.tuples), (1, 0, 0));
        assert_eq!(c.sum_value(), None);
    }

    #[test]
    fn counts_and_sums_live_tuples() {
        let mut b = PageBuilder::new();
        for v in [5, -7, 1_000_000] {
            b.tuple(&TupleSpec::live(&[Some(v), Some(1)]));
        }
        let c = count(&b.build()).unwrap();
        assert_eq!(c.tuples, 3);
        assert_eq!(c.sum_value(), Some(5 - 7 + 1_000_000));
        // Without summing, the sum is untouched.
        let mut c = Counts::default();
        count_page(0, &b.build(), false, &mut c).unwrap();
        assert_eq!((c.tuples, c.sum_value()), (3, None));
    }

    #[test]
    fn the_sum_is_64_bit() {
        let mut b = PageBuilder::new();
        for _ in 0..10 {
            b.tuple(&TupleSpec::live(&[Some(i32::MAX)]));
        }
        let c = count(&b.build()).unwrap();
        assert_eq!(c.sum_value(), Some(10 * i128::from(i32::MAX)));
    }

    #[test]
    fn nulls_in_the_first_column_and_later_ones() {
        let mut b = PageBuilder::new();
        b.tuple(&TupleSpec::live(&[None, Some(3)]));
        b.tuple(&TupleSpec::live(&[Some(4), None]));
        // Nine attributes: a two-byte bitmap, t_hoff 32.
        let mut nine = vec![Some(1); 9];
        nine[8] = None;
        b.tuple(&TupleSpec::live(&nine));
        // natts 0: the column is missing (NULL).
        b.tuple(&TupleSpec::live(&[]));
        let c = count(&b.build()).unwrap();
        assert_eq!((c.tuples, c.non_null, c.sum_value()), (4, 2, Some(5)));
        // All NULL: sum is NULL, count is not 0.
        let mut b = PageBuilder::new();
        b.tuple(&TupleSpec::live(&[None]));
        b.tuple(&TupleSpec::live(&[None, Some(9)]));
        let c = count(&b.build()).unwrap();
        assert_eq!((c.tuples, c.sum_value()), (2, None));
    }

    #[test]
    fn visibility_by_hint_bits() {
        let with = |xmin: u32, xmax: u32, im: u16| TupleSpec {
            xmin,
            xmax,
            infomask: im,
            infomask2: 0,
            values: vec![Some(1)],
        };
        let cases = [
            // (tuple, counted)
            (with(100, 0, XMAX_INVALID_ONLY), true),
            (with(100, 0, 0), true),                   // no hints at all
            (with(100, 0, HEAP_XMIN_COMMITTED), true), // xmax 0
            (with(100, 0, HEAP_XMIN_FROZEN | HEAP_XMAX_INVALID), true), // frozen
            (with(2, 0, HEAP_XMAX_INVALID), true),     // pre-9.4 frozen
            (with(100, 0, HEAP_XMIN_INVALID | HEAP_XMAX_INVALID), false), // aborted insert
            (with(0, 0, HEAP_XMAX_INVALID), false),    // killed speculative insertion
            (with(0, 0, HEAP_XMIN_INVALID | HEAP_XMAX_INVALID), false),
            (with(100, 200, HEAP_XMIN_COMMITTED), false), // deleted, unhinted
            (
                with(100, 200, HEAP_XMIN_COMMITTED | HEAP_XMAX_COMMITTED),
                false,
            ),
            (with(100, 200, HEAP_XMIN_FROZEN), false), // frozen, then deleted
            (
                with(100, 200, HEAP_XMIN_COMMITTED | HEAP_XMAX_INVALID),
                true,
            ), // aborted delete
            (
                with(100, 200, HEAP_XMIN_COMMITTED | HEAP_XMAX_LOCK_ONLY),
                true,
            ), // FOR UPDATE
            (
                with(100, 200, HEAP_XMIN_COMMITTED | HEAP_XMAX_EXCL_LOCK),
                true,
            ), // pre-9.3 lock
            (
                with(
                    100,
                    200,
                    HEAP_XMIN_COMMITTED | HEAP_XMAX_KEYSHR_LOCK | HEAP_XMAX_LOCK_ONLY,
                ),
                true,
            ),
            (
                with(
                    100,
                    9,
                    HEAP_XMIN_COMMITTED | HEAP_XMAX_IS_MULTI | HEAP_XMAX_LOCK_ONLY,
                ),
                true,
            ),
            // A multixact with an updater.
            (
                with(100, 9, HEAP_XMIN_COMMITTED | HEAP_XMAX_IS_MULTI),
                false,
            ),
            (
                with(
                    100,
                    9,
                    HEAP_XMIN_COMMITTED | HEAP_XMAX_IS_MULTI | HEAP_XMAX_EXCL_LOCK,
                ),
                false,
            ),
        ];
        for (spec, counted) in cases {
            let mut b = PageBuilder::new();
            b.tuple(&spec);
            let c = count(&b.build()).unwrap();
            assert_eq!(c.tuples, u64::from(counted), "{spec:?}");
            assert_eq!(c.invisible, u64::from(!counted), "{spec:?}");
            assert_eq!(c.sum_value(), counted.then_some(1), "{spec:?}");
        }
    }

    const XMAX_INVALID_ONLY: u16 = HEAP_XMIN_COMMITTED | HEAP_XMAX_INVALID;

    #[test]
    fn hot_chains_count_the_live_member_once() {
        // Before pruning: 1 is the old version (HOT-updated, deleted by its
        // updater), 2 the new one (heap-only).
        let mut b = PageBuilder::new();
        b.tuple(&TupleSpec {
            xmax: 1001,
            infomask: HEAP_XMIN_COMMITTED | HEAP_XMAX_COMMITTED | HEAP_UPDATED,
            infomask2: HEAP_HOT_UPDATED,
            ..TupleSpec::live(&[Some(10)])
        });
        b.tuple(&TupleSpec {
            xmin: 1001,
            infomask2: HEAP_ONLY_TUPLE,
            ..TupleSpec::live(&[Some(11)])
        });
        let page = b.build();
        let c = count(&page).unwrap();
        assert_eq!((c.tuples, c.invisible, c.sum_value()), (1, 1, Some(11)));
        check_hot_chains(7, &page).unwrap();
        // After pruning: 1 redirects to 3 (the chain's live end), 2 is
        // unused, 3 is live; 4 is a dead line pointer.
        let mut b = PageBuilder::new();
        b.line_pointer(LinePointer {
            off: 3,
            flags: LpFlags::Redirect,
            len: 0,
        });
        b.line_pointer(LinePointer {
            off: 0,
            flags: LpFlags::Unused,
            len: 0,
        });
        b.tuple(&TupleSpec {
            infomask2: HEAP_ONLY_TUPLE,
            ..TupleSpec::live(&[Some(12)])
        });
        b.line_pointer(LinePointer {
            off: 0,
            flags: LpFlags::Dead,
            len: 0,
        });
        let page = b.build();
        let c = count(&page).unwrap();
        assert_eq!(
            (c.tuples, c.redirects, c.unused, c.dead, c.sum_value()),
            (1, 1, 1, 1, Some(12))
        );
        check_hot_chains(7, &page).unwrap();
        // A redirect to a tuple that is not heap-only.
        let mut b = PageBuilder::new();
        b.line_pointer(LinePointer {
            off: 2,
            flags: LpFlags::Redirect,
            len: 0,
        });
        b.tuple(&TupleSpec::live(&[Some(1)]));
        let e = check_hot_chains(7, &b.build()).unwrap_err();
        assert!(e.to_string().contains("not a heap-only tuple"), "{e}");
        // count_page checks it too.
        let e = count(&b.build()).unwrap_err();
        assert!(e.to_string().contains("not a heap-only tuple"), "{e}");
    }

    #[test]
    fn real_server_page_bytes() {
        // The first page PostgreSQL 15 wrote for
        // `create table t (i int, filler text) with (fillfactor=10)` with
        // one row (1, repeat('x', 900)): header, one line pointer, the tuple
        // header at 7256 (xmin 0x2d4, XMAX_INVALID | HASVARWIDTH, t_hoff 24).
        let mut p = vec![0u8; BLCKSZ];
        p[..24].copy_from_slice(&[
            0, 0, 0, 0, 0x88, 0xec, 0x51, 1, 0, 0, 0, 0, 0x1c, 0, 0x58, 0x1c, 0, 0x20, 4, 0x20, 0,
            0, 0, 0,
        ]);
        p[24..28].copy_from_slice(&[0x58, 0x9c, 0x48, 0x07]);
        let t = 7256;
        p[t..t + 24].copy_from_slice(&[
            0xd4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 8, 0x18, 0,
        ]);
        p[t + 24..t + 28].copy_from_slice(&1i32.to_le_bytes());
        let h = PageHeader::parse(&p);
        assert_eq!((h.lower, h.upper, h.special), (28, 7256, 8192));
        assert_eq!((h.page_size(), h.layout_version()), (8192, 4));
        let lp = LinePointer::from_raw(u32_at(&p, 24));
        assert_eq!((lp.off, lp.flags, lp.len), (7256, LpFlags::Normal, 932));
        let th = TupleHeader::parse(&p[t..]);
        assert_eq!((th.xmin, th.xmax, th.natts(), th.hoff), (0x2d4, 0, 2, 24));
        assert_eq!(th.ctid, (0, 1));
        let c = count(&p).unwrap();
        assert_eq!((c.tuples, c.sum_value()), (1, Some(1)));
    }

    #[test]
    fn not_heap_pages() {
        // A btree page: special space of 16 bytes.
        let mut p = PageBuilder::new().build();
        set_u16(&mut p, 16, 8176);
        assert_eq!(corruption(&p), Corruption::SpecialSpace(8176));
        let msg = count(&p).unwrap_err().to_string();
        assert!(
            msg.contains("not a heap relation: block 7 has special space (index?)"),
            "{msg}"
        );
        // Wrong page size, wrong layout version.
        let mut p = PageBuilder::new().build();
        set_u16(&mut p, 18, 0x1004);
        assert_eq!(corruption(&p), Corruption::PageSize(0x1004));
        set_u16(&mut p, 18, 0x2003);
        assert_eq!(corruption(&p), Corruption::LayoutVersion(0x2003));
        // Random bytes.
        let mut x = 0x1234_5678_9abc_def0u64;
        let random: Vec<u8> = (0..BLCKSZ)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(count(&random).is_err());
        // Not a whole page.
        assert_eq!(corruption(&[0u8; 100]), Corruption::PageLength(100));
        // A "new" page with bytes in it.
        let mut p = vec![0u8; BLCKSZ];
        p[5000] = 1;
        assert_eq!(corruption(&p), Corruption::NewPageNotZero);
    }

    #[test]
    fn corrupt_headers() {
        let mut b = PageBuilder::new();
        b.tuple(&TupleSpec::live(&[Some(1)]));
        let good = b.build();
        let bounds = |lower, upper| {
            let mut p = good.clone();
            set_u16(&mut p, 12, lower);
            set_u16(&mut p, 14, upper);
            corruption(&p)
        };
        assert!(matches!(bounds(20, 8160), Corruption::Bounds { .. }));
        assert!(matches!(bounds(30, 8160), Corruption::Bounds { .. }));
        assert!(matches!(bounds(8168, 8160), Corruption::Bounds { .. }));
        assert!(matches!(bounds(28, 8200), Corruption::Bounds { .. }));
        let mut p = good.clone();
        set_u16(&mut p, 10, 0x0010);
        assert_eq!(corruption(&p), Corruption::Flags(0x0010));
        let mut p = good.clone();
        set_u16(&mut p, 10, 0x0007);
        assert_eq!(count(&p).unwrap().tuples, 1);
    }

    #[test]
    fn corrupt_line_pointers_and_tuples() {
        let lp_err = |lp: LinePointer| {
            let mut b = PageBuilder::new();
            b.tuple(&TupleSpec::live(&[Some(1)]));
            b.line_pointer(lp);
            match corruption(&b.build()) {
                Corruption::LinePointer { offnum, why } => {
                    assert_eq!(offnum, 2);
                    why
                }
                other => panic!("{lp:?}: {other:?}"),
            }
        };
        let lp = |off, flags, len| LinePointer { off, flags, len };
        assert!(lp_err(lp(8000, LpFlags::Normal, 8)).contains("shorter"));
        assert!(lp_err(lp(8176, LpFlags::Normal, 100)).contains("outside"));
        assert!(lp_err(lp(100, LpFlags::Normal, 40)).contains("outside")); // below pd_upper
        assert!(lp_err(lp(8164, LpFlags::Normal, 24)).contains("aligned"));
        assert!(lp_err(lp(5, LpFlags::Redirect, 0)).contains("redirect to offset 5"));
        assert!(lp_err(lp(2, LpFlags::Redirect, 0)).contains("itself"));
        assert!(lp_err(lp(1, LpFlags::Redirect, 4)).contains("lp_len"));
        assert!(lp_err(lp(3, LpFlags::Unused, 0)).contains("unused"));
        assert!(lp_err(lp(100, LpFlags::Dead, 40)).contains("outside"));
        // A redirect to an unused pointer.
        let mut b = PageBuilder::new();
        b.line_pointer(lp(2, LpFlags::Redirect, 0));
        b.line_pointer(lp(0, LpFlags::Unused, 0));
        assert!(matches!(
            corruption(&b.build()),
            Corruption::LinePointer { offnum: 1, why } if why.contains("not a tuple")
        ));
        // Tuple headers.
        let tuple_err = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut t = vec![0u8; 24];
            t[0] = 100;
            t[18] = 1; // natts 1
            t[20..22].copy_from_slice(&XMAX_INVALID_ONLY.to_le_bytes());
            t[22] = 24;
            t.extend_from_slice(&5i32.to_le_bytes());
            edit(&mut t);
            let mut b = PageBuilder::new();
            b.raw_tuple(&t);
            match count(&b.build()) {
                Ok(c) => {
                    assert_eq!(c.sum_value(), Some(5));
                    None
                }
                Err(PageError {
                    corruption: Corruption::Tuple { offnum: 1, why },
                    ..
                }) => Some(why),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(tuple_err(&|_| {}), None);
        assert!(tuple_err(&|t| t[22] = 20).unwrap().contains("t_hoff 20"));
        assert!(tuple_err(&|t| t[22] = 25).unwrap().contains("t_hoff 25"));
        assert!(tuple_err(&|t| t[22] = 40).unwrap().contains("t_hoff 40"));
        // 200 attributes with nulls need a 25-byte bitmap: t_hoff 24 is short.
        assert!(tuple_err(&|t| {
            t[18] = 200;
            t[20] |= 1;
        })
        .unwrap()
        .contains("t_hoff 24"));
        // A first column too short for an int4.
        assert!(tuple_err(&|t| t.truncate(26))
            .unwrap()
            .contains("not an int4"));
        // xmin 0 with XMIN_COMMITTED or frozen is trusted, as PostgreSQL does.
        assert_eq!(tuple_err(&|t| t[0] = 0), None);
        assert_eq!(
            tuple_err(&|t| {
                t[0] = 0;
                t[21] |= 0x03; // XMIN_FROZEN
            }),
            None
        );
    }

    #[test]
    fn errors_leave_counts_unchanged() {
        let mut c = Counts::default();
        let mut b = PageBuilder::new();
        b.tuple(&TupleSpec::live(&[Some(1)]));
        count_page(0, &b.build(), true, &mut c).unwrap();
        b.line_pointer(LinePointer {
            off: 9,
            flags: LpFlags::Redirect,
            len: 0,
        });
        let before = c;
        assert!(count_page(1, &b.build(), true, &mut c).is_err());
        assert_eq!(c, before);
    }
}
