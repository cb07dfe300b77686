//! The sections that print their own tables after the main report (page size, allocators,
//! read-after-persist and PERC, the service, the cluster): their plans, their measurement in run order,
//! their text and markdown, and their part of the JSON.

use std::path::Path;

use pmem_bench::allocbench::{self, AllocPlan, AllocResults};
use pmem_bench::cluster::{self, ClusterResults};
use pmem_bench::flushlat::{self, FlushPlan, FlushResults};
use pmem_bench::pagesize::{self, PagePlan, PageResults};
use pmem_bench::service::{self, ServiceResults};

use crate::cli::{Cli, SectionArg, Selection};
use crate::{Progress, RunError, TX_POOL_PREFIX};

/// What the standalone sections measured (`None`: not selected).
pub(crate) struct Standalone {
    page_size: Option<PageResults>,
    alloc: Option<AllocResults>,
    flush: Option<FlushResults>,
    service: Option<ServiceResults>,
    cluster: Option<ClusterResults>,
}

/// Which standalone sections a run measures.
pub(crate) struct StandalonePlan {
    page_size: bool,
    alloc: bool,
    flush: FlushPlan,
    service: bool,
    cluster: bool,
}

impl StandalonePlan {
    pub(crate) fn new(cli: &Cli, selection: &Selection) -> StandalonePlan {
        StandalonePlan {
            page_size: selection.runs(SectionArg::PageSize),
            alloc: selection.runs(SectionArg::Alloc),
            flush: FlushPlan::new(
                cli.quick,
                selection.runs(SectionArg::ReadAfterPersist),
                selection.runs(SectionArg::Perc),
            ),
            service: selection.runs(SectionArg::Service),
            cluster: selection.runs(SectionArg::Cluster),
        }
    }

    /// Progress steps: one per section measured.
    pub(crate) fn steps(&self) -> usize {
        usize::from(self.page_size)
            + usize::from(self.alloc)
            + usize::from(self.flush.runs())
            + usize::from(self.service)
            + usize::from(self.cluster)
    }

    /// Measure the sections chosen, in order, with pools and scratch files under `dir`.
    pub(crate) fn measure(
        &self,
        cli: &Cli,
        dir: &Path,
        progress: &mut Progress,
    ) -> Result<Standalone, RunError> {
        let page_size = if self.page_size {
            progress.next();
            let mut plan = if cli.quick {
                PagePlan::quick()
            } else {
                PagePlan::full()
            };
            if let Some(size) = cli.page_size {
                plan = plan.only(size.page_size());
            }
            progress.line(&format!(
                "page size: CCEH and FAST&FAIR, {} records, {} page sizes x {} rounds",
                plan.records,
                plan.sizes.len(),
                plan.rounds
            ));
            Some(pagesize::measure(&plan, |r, n| progress.round(r, n))?)
        } else {
            None
        };
        let alloc = if self.alloc {
            progress.next();
            let plan = if cli.quick {
                AllocPlan::quick()
            } else {
                AllocPlan::full()
            };
            progress.line(&format!(
                "alloc: {} sizes x {} thread counts x {} rounds",
                allocbench::ALLOC_SIZES.len(),
                allocbench::THREADS.len(),
                plan.rounds
            ));
            let page_size = cli.page_size.map_or(Default::default(), |p| p.page_size());
            Some(allocbench::measure(
                &plan,
                page_size,
                dir,
                TX_POOL_PREFIX,
                |r, n| progress.round(r, n),
            )?)
        } else {
            None
        };
        let flush = self.flush.runs().then(|| {
            progress.next();
            flushlat::measure(
                &self.flush,
                |l| progress.line(l),
                |r, n| progress.round(r, n),
            )
        });
        let service = if self.service {
            progress.next();
            Some(service::run(cli.quick, dir, TX_POOL_PREFIX, |l| {
                progress.line(l)
            })?)
        } else {
            None
        };
        let cluster = if self.cluster {
            progress.next();
            // The nodes are processes of this binary (`pmem-bench cluster-node ...`).
            let program =
                std::env::current_exe().map_err(|source| cluster::ClusterBenchError::Io {
                    what: "find this binary, to start the cluster's nodes".into(),
                    source,
                })?;
            Some(cluster::run(
                cli.quick,
                &program,
                dir,
                TX_POOL_PREFIX,
                |l| progress.line(l),
            )?)
        } else {
            None
        };
        Ok(Standalone {
            page_size,
            alloc,
            flush,
            service,
            cluster,
        })
    }
}

impl Standalone {
    /// Their tables as text, in run order.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        if let Some(r) = &self.page_size {
            out.push_str(&pagesize::report::text(r));
        }
        if let Some(r) = &self.alloc {
            out.push_str(&allocbench::report::text(r));
        }
        if let Some(r) = &self.flush {
            out.push_str(&flushlat::report::text(r));
        }
        if let Some(r) = &self.service {
            out.push_str(&service::report::text(r));
        }
        if let Some(r) = &self.cluster {
            out.push_str(&cluster::report::text(r));
        }
        out
    }

    /// Their tables as markdown, in run order.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        if let Some(r) = &self.page_size {
            out.push_str(&pagesize::report::markdown(r));
        }
        if let Some(r) = &self.alloc {
            out.push_str(&allocbench::report::markdown(r));
        }
        if let Some(r) = &self.flush {
            out.push_str(&flushlat::report::markdown(r));
        }
        if let Some(r) = &self.service {
            out.push_str(&service::report::markdown(r));
        }
        if let Some(r) = &self.cluster {
            out.push_str(&cluster::report::markdown(r));
        }
        out
    }

    /// Add their results to the report's JSON (`null` for a section not measured).
    pub(crate) fn add_to_json(&self, json: &mut serde_json::Value) -> Result<(), RunError> {
        json["page_size"] = serde_json::to_value(&self.page_size)?;
        json["alloc"] = serde_json::to_value(&self.alloc)?;
        flushlat::add_to_json(self.flush.as_ref(), json)?;
        json["service"] = serde_json::to_value(&self.service)?;
        json["cluster"] = serde_json::to_value(&self.cluster)?;
        Ok(())
    }
}
