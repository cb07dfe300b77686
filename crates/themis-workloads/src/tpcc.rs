//! TPCC: a small `new_order` transaction (Themis, Table II, "add_new_order transaction"):
//! several logged stores and allocations per transaction.
//!
//! One warehouse with `districts` districts and `items` stock rows. `new_order` for district `d`
//! with lines `(item, quantity)`:
//!
//! 1. takes `o_id` from the district's `next_o_id` and increments it (one logged word);
//! 2. allocates and writes an order record and a block of order lines (fresh: not logged);
//! 3. links the order from the district's ring of the last `orders_kept` orders (one logged
//!    word), freeing the order it replaces: TPC-C's Delivery transaction removes old orders,
//!    this ring is the simplification that keeps the heap bounded;
//! 4. updates each item's stock row as TPC-C does (`s_quantity` down by the quantity, refilled
//!    by 91 when it would drop below 10; `s_ytd` up by the quantity; `s_order_cnt` up by one):
//!    three logged words per distinct item.
//!
//! Every snapshot is taken before the first write, so the batched policy fences once for them.
//! TPC-C rolls back the 1% of new orders that name an unused item; here such an order (or any
//! invalid input) is refused before the transaction starts.
//!
//! Layout: the root is `[districts, district count, stock, item count, ring, orders kept]`;
//! a district row is 64 bytes `[d_id, next_o_id, ytd, tax, 0, 0, 0, 0]`; a stock row 32 bytes
//! `[quantity, ytd, order_cnt, remote_cnt]`; the ring one word per (district, slot); an order
//! 64 bytes `[o_id, d_id, c_id, ol_cnt, lines, total, all_local, 0]`; an order line 32 bytes
//! `[number, i_id, quantity, amount]`.

use pmem_ordering::{Backend, Hardware, PPtr};

use super::{corrupt, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a district row.
pub const DISTRICT_BYTES: u64 = 64;
/// Bytes of a stock row.
pub const STOCK_BYTES: u64 = 32;
/// Bytes of an order record.
pub const ORDER_BYTES: u64 = 64;
/// Bytes of an order line.
pub const LINE_BYTES: u64 = 32;
/// Most lines in one order (TPC-C: 5 to 15).
pub const MAX_LINES: usize = 15;
/// Largest quantity of one line (TPC-C: 1 to 10).
pub const MAX_QUANTITY: u64 = 10;

/// The price of item `i_id` in cents (TPC-C: 1.00 to 100.00), fixed by the id.
pub fn item_price(i_id: u64) -> u64 {
    100 + i_id.wrapping_mul(7919) % 9901
}

/// Stock quantity of item `i_id` when the table is created (TPC-C: 10 to 100).
pub fn initial_quantity(i_id: u64) -> u64 {
    10 + i_id.wrapping_mul(37) % 91
}

/// Shape of a new TPCC database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccConfig {
    /// Districts (TPC-C: 10 per warehouse).
    pub districts: u64,
    /// Items, each with a stock row (TPC-C: 100 000; fewer keep the table small).
    pub items: u64,
    /// Orders each district keeps; the oldest is freed by the order that replaces it.
    pub orders_kept: u64,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig {
            districts: 10,
            items: 10_000,
            orders_kept: 16,
        }
    }
}

/// One line of a new order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineInput {
    /// The item, `1..=items`.
    pub item: u64,
    /// How many, `1..=MAX_QUANTITY`.
    pub quantity: u64,
}

/// The input of one `new_order`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NewOrder {
    /// The district, `1..=districts`.
    pub district: u64,
    /// The customer (any id: there is no customer table).
    pub customer: u64,
    /// The lines, 1 to [`MAX_LINES`].
    pub lines: Vec<LineInput>,
}

/// A district row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct District {
    /// The district's id.
    pub d_id: u64,
    /// The id the next order gets.
    pub next_o_id: u64,
    /// Year-to-date payments (new_order leaves it alone).
    pub ytd: u64,
    /// Tax in basis points.
    pub tax: u64,
}

/// A stock row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stock {
    /// Units in stock.
    pub quantity: u64,
    /// Units ordered, year to date.
    pub ytd: u64,
    /// Orders that named the item.
    pub order_cnt: u64,
    /// Orders from other warehouses (always 0: there is one warehouse).
    pub remote_cnt: u64,
}

impl Stock {
    /// The row as `new_order` leaves it after ordering `quantity` units.
    pub fn after_order(self, quantity: u64) -> Stock {
        let q = self.quantity;
        Stock {
            quantity: if q >= quantity + 10 {
                q - quantity
            } else {
                (q + 91).saturating_sub(quantity)
            },
            ytd: self.ytd + quantity,
            order_cnt: self.order_cnt + 1,
            remote_cnt: self.remote_cnt,
        }
    }
}

/// An order line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderLine {
    /// Its number in the order, from 1.
    pub number: u64,
    /// The item.
    pub i_id: u64,
    /// Units ordered.
    pub quantity: u64,
    /// `quantity * item_price(i_id)`, in cents.
    pub amount: u64,
}

/// An order with its lines.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Order {
    /// The order's id in its district.
    pub o_id: u64,
    /// The district.
    pub d_id: u64,
    /// The customer.
    pub c_id: u64,
    /// Sum of the lines' amounts, in cents.
    pub total: u64,
    /// The lines.
    pub lines: Vec<OrderLine>,
}

impl Order {
    /// The order `new_order` writes for `input` with id `o_id`.
    pub fn expected(input: &NewOrder, o_id: u64) -> Order {
        let lines: Vec<OrderLine> = input
            .lines
            .iter()
            .enumerate()
            .map(|(n, l)| OrderLine {
                number: n as u64 + 1,
                i_id: l.item,
                quantity: l.quantity,
                amount: l.quantity * item_price(l.item),
            })
            .collect();
        Order {
            o_id,
            d_id: input.district,
            c_id: input.customer,
            total: lines.iter().map(|l| l.amount).sum(),
            lines,
        }
    }
}

/// A one-warehouse TPCC database in a heap, for `new_order`.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::tpcc::{LineInput, NewOrder, Tpcc, TpccConfig};
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("tpcc", 8 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let db = Tpcc::create(&heap, heap.pool().root_offset(), TpccConfig::default())?;
/// let order = NewOrder { district: 3, customer: 9, lines: vec![LineInput { item: 5, quantity: 2 }] };
/// assert_eq!(db.new_order(&order)?, Some(1));
/// assert_eq!(db.district(3)?.unwrap().next_o_id, 2);
/// assert_eq!(db.stock(5)?.unwrap().ytd, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tpcc<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
    districts: u64,
    district_count: u64,
    stock: u64,
    items: u64,
    ring: u64,
    orders_kept: u64,
}

impl<B: Backend> Clone for Tpcc<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Tpcc<'_, B> {}

impl<B: Backend> std::fmt::Debug for Tpcc<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tpcc")
            .field("root", &self.root)
            .field("districts", &self.district_count)
            .field("items", &self.items)
            .field("orders_kept", &self.orders_kept)
            .finish()
    }
}

fn le_bytes(words: impl IntoIterator<Item = u64>) -> Vec<u8> {
    words.into_iter().flat_map(u64::to_le_bytes).collect()
}

impl<'h, B: Backend> Tpcc<'h, B> {
    /// Bytes of the root: `[districts, district count, stock, item count, ring, orders kept]`.
    pub const ROOT_BYTES: u64 = 48;

    /// Allocate and fill the district, stock and ring tables and root them at `root`, in one
    /// transaction.
    pub fn create(
        heap: &'h Heap<B>,
        root: u64,
        config: TpccConfig,
    ) -> Result<Tpcc<'h, B>, TxError> {
        let TpccConfig {
            districts: district_count,
            items,
            orders_kept,
        } = config;
        if district_count == 0 || items == 0 || orders_kept == 0 {
            return Err(TxError::InvalidConfig {
                reason: format!("TPCC needs districts, items and kept orders: {config:?}"),
            });
        }
        let size = |n: u64, each: u64| {
            n.checked_mul(each).ok_or_else(|| TxError::InvalidConfig {
                reason: format!("TPCC tables of {config:?} overflow the address space"),
            })
        };
        let (district_bytes, stock_bytes) = (
            size(district_count, DISTRICT_BYTES)?,
            size(items, STOCK_BYTES)?,
        );
        let ring_bytes = size(size(district_count, orders_kept)?, 8)?;
        let (districts, stock, ring) = heap.transaction(|tx| {
            let districts = tx.alloc(district_bytes)?.offset();
            let stock = tx.alloc(stock_bytes)?.offset();
            let ring = tx.alloc(ring_bytes)?.offset();
            tx.write(
                districts,
                &le_bytes((1..=district_count).flat_map(|d| [d, 1, 0, d * 7 % 2000, 0, 0, 0, 0])),
            )?;
            tx.write(
                stock,
                &le_bytes((1..=items).flat_map(|i| [initial_quantity(i), 0, 0, 0])),
            )?;
            tx.write(ring, &vec![0u8; ring_bytes as usize])?;
            tx.write_value(
                root,
                &[districts, district_count, stock, items, ring, orders_kept],
            )?;
            Ok::<_, TxError>((districts, stock, ring))
        })?;
        Ok(Tpcc {
            heap,
            root,
            districts,
            district_count,
            stock,
            items,
            ring,
            orders_kept,
        })
    }

    /// The database rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<Tpcc<'h, B>, TxError> {
        let pool = heap.pool();
        let [districts, district_count, stock, items, ring, orders_kept] =
            words::<B, 6>(pool, root)?;
        if [districts, district_count, stock, items, ring, orders_kept].contains(&0) {
            return Err(corrupt("TPCC database", root, "no tables (never created?)"));
        }
        for (at, n) in [
            (districts, district_count.saturating_mul(DISTRICT_BYTES)),
            (stock, items.saturating_mul(STOCK_BYTES)),
            (
                ring,
                district_count.saturating_mul(orders_kept).saturating_mul(8),
            ),
        ] {
            pool.check_range(at, n)
                .map_err(|e| corrupt("TPCC database", root, e))?;
        }
        Ok(Tpcc {
            heap,
            root,
            districts,
            district_count,
            stock,
            items,
            ring,
            orders_kept,
        })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The shape the database was created with.
    pub fn config(&self) -> TpccConfig {
        TpccConfig {
            districts: self.district_count,
            items: self.items,
            orders_kept: self.orders_kept,
        }
    }

    fn district_at(&self, d_id: u64) -> Option<u64> {
        (1..=self.district_count)
            .contains(&d_id)
            .then(|| self.districts + (d_id - 1) * DISTRICT_BYTES)
    }

    fn stock_at(&self, i_id: u64) -> Option<u64> {
        (1..=self.items)
            .contains(&i_id)
            .then(|| self.stock + (i_id - 1) * STOCK_BYTES)
    }

    /// The ring slot that holds (or will hold) order `o_id` of district `d_id` (in range).
    fn slot(&self, d_id: u64, o_id: u64) -> u64 {
        self.ring + 8 * ((d_id - 1) * self.orders_kept + o_id % self.orders_kept)
    }

    /// Whether `input` names a district, 1 to [`MAX_LINES`] lines, known items and quantities
    /// in `1..=MAX_QUANTITY`.
    pub fn is_valid(&self, input: &NewOrder) -> bool {
        self.district_at(input.district).is_some()
            && (1..=MAX_LINES).contains(&input.lines.len())
            && input.lines.iter().all(|l| {
                self.stock_at(l.item).is_some() && (1..=MAX_QUANTITY).contains(&l.quantity)
            })
    }

    /// `NEW_ORDER`, in one transaction: returns the new order's id, or `None` (and no
    /// transaction) if the input is not valid ([`Tpcc::is_valid`]).
    pub fn new_order(&self, input: &NewOrder) -> Result<Option<u64>, TxError> {
        if !self.is_valid(input) {
            return Ok(None);
        }
        let district = self.district_at(input.district).expect("checked");
        let stock: Vec<u64> = input
            .lines
            .iter()
            .map(|l| self.stock_at(l.item).expect("checked"))
            .collect();
        self.heap.transaction(|tx| {
            let o_id: u64 = tx.read(district + 8)?;
            let slot = self.slot(input.district, o_id);
            let retired: u64 = tx.read(slot)?;
            // Everything logged, first: one fence for all of it under the batched policy.
            tx.snapshot(district + 8, 8)?;
            tx.snapshot(slot, 8)?;
            for &s in &stock {
                tx.snapshot(s, 24)?;
            }
            if retired != 0 {
                let lines: u64 = tx.read(retired + 32)?;
                tx.free(PPtr::<u8>::new(lines))?;
                tx.free(PPtr::<u8>::new(retired))?;
            }
            let order = Order::expected(input, o_id);
            let lines = tx.alloc(LINE_BYTES * order.lines.len() as u64)?.offset();
            tx.write(
                lines,
                &le_bytes(
                    order
                        .lines
                        .iter()
                        .flat_map(|l| [l.number, l.i_id, l.quantity, l.amount]),
                ),
            )?;
            let record = tx.alloc(ORDER_BYTES)?.offset();
            tx.write_value(
                record,
                &[
                    o_id,
                    order.d_id,
                    order.c_id,
                    order.lines.len() as u64,
                    lines,
                    order.total,
                    1,
                    0,
                ],
            )?;
            tx.write_value(district + 8, &(o_id + 1))?;
            tx.write_value(slot, &record)?;
            for (l, &s) in input.lines.iter().zip(&stock) {
                let [quantity, ytd, order_cnt] = words::<B, 3>(tx.pool(), s)?;
                let after = Stock {
                    quantity,
                    ytd,
                    order_cnt,
                    remote_cnt: 0,
                }
                .after_order(l.quantity);
                tx.write_value(s, &[after.quantity, after.ytd, after.order_cnt])?;
            }
            Ok(Some(o_id))
        })
    }

    /// District `d_id`'s row.
    pub fn district(&self, d_id: u64) -> Result<Option<District>, TxError> {
        self.district_at(d_id)
            .map(|at| {
                let [d_id, next_o_id, ytd, tax] = words::<B, 4>(self.heap.pool(), at)?;
                Ok(District {
                    d_id,
                    next_o_id,
                    ytd,
                    tax,
                })
            })
            .transpose()
    }

    /// Item `i_id`'s stock row.
    pub fn stock(&self, i_id: u64) -> Result<Option<Stock>, TxError> {
        self.stock_at(i_id)
            .map(|at| {
                let [quantity, ytd, order_cnt, remote_cnt] = words::<B, 4>(self.heap.pool(), at)?;
                Ok(Stock {
                    quantity,
                    ytd,
                    order_cnt,
                    remote_cnt,
                })
            })
            .transpose()
    }

    /// The order record at `record` with its lines, and the lines' block.
    fn read_order(&self, record: u64) -> Result<(Order, u64), TxError> {
        let pool = self.heap.pool();
        let [o_id, d_id, c_id, count, lines, total, _, _] = words::<B, 8>(pool, record)?;
        if count as usize > MAX_LINES {
            return Err(corrupt(
                "TPCC database",
                self.root,
                format!("order at {record:#x} has {count} lines"),
            ));
        }
        let lines_read = (0..count)
            .map(|i| {
                let [number, i_id, quantity, amount] = words::<B, 4>(pool, lines + i * LINE_BYTES)?;
                Ok(OrderLine {
                    number,
                    i_id,
                    quantity,
                    amount,
                })
            })
            .collect::<Result<Vec<_>, TxError>>()?;
        Ok((
            Order {
                o_id,
                d_id,
                c_id,
                total,
                lines: lines_read,
            },
            lines,
        ))
    }

    /// Order `o_id` of district `d_id`, if the district still keeps it.
    pub fn order(&self, d_id: u64, o_id: u64) -> Result<Option<Order>, TxError> {
        if self.district_at(d_id).is_none() {
            return Ok(None);
        }
        let record: u64 = self.heap.pool().read(self.slot(d_id, o_id))?;
        if record == 0 {
            return Ok(None);
        }
        let (order, _) = self.read_order(record)?;
        Ok((order.o_id == o_id && order.d_id == d_id).then_some(order))
    }

    /// The orders district `d_id` keeps, oldest first.
    pub fn orders(&self, d_id: u64) -> Result<Vec<Order>, TxError> {
        let Some(district) = self.district(d_id)? else {
            return Ok(Vec::new());
        };
        let first = district.next_o_id.saturating_sub(self.orders_kept).max(1);
        (first..district.next_o_id)
            .map(|o| {
                self.order(d_id, o)?.ok_or_else(|| {
                    corrupt(
                        "TPCC database",
                        self.root,
                        format!("district {d_id} lost order {o}"),
                    )
                })
            })
            .collect()
    }

    /// Every heap block the database owns: the three tables, then each kept order's record and
    /// lines, ring slot by ring slot.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        let pool = self.heap.pool();
        let mut out = vec![self.districts, self.stock, self.ring];
        for i in 0..self.district_count * self.orders_kept {
            let record: u64 = pool.read(self.ring + 8 * i)?;
            if record != 0 {
                let (_, lines) = self.read_order(record)?;
                out.extend([record, lines]);
            }
        }
        Ok(out)
    }
}
