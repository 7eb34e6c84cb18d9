//! [`ModelEngine`]: the DSA engine on device models, as one [`Engine`] other crates' tests and
//! harnesses can hand to a mover.

use switchyard_media::Persist;

use crate::dsa::model::{ModelConfig, ModelDevice};
use crate::dsa::{DsaConfig, DsaEngine, Portal};
use crate::{Batch, Budget, Engine, EngineInfo, Pauses, RecordSnapshot, SubmitError};

/// The name a [`ModelEngine`] reports ([`EngineInfo::name`]): every figure measured on it is
/// labelled as the model's, never as hardware's.
pub const MODEL_ENGINE_NAME: &str = "dsa-model";

/// A [`DsaEngine`] whose channels are device models (one [`ModelDevice`] per channel), for
/// tests and harnesses only. It behaves as the DSA engine does (it *is* the DSA engine, on the
/// model's portals) and reports itself as [`MODEL_ENGINE_NAME`].
///
/// Fields drop in order: the engine, which finishes its work on the models, before them.
pub struct ModelEngine {
    engine: DsaEngine,
    models: Vec<ModelDevice>,
}

impl ModelEngine {
    /// Starts `channels` models configured as `model` and the DSA engine on them. Engine and
    /// models use `config.persist`'s kernels, so a traced `Persist` records the device's
    /// writes as well as the engine's durable records.
    pub fn start(
        channels: usize,
        model: &ModelConfig,
        config: DsaConfig,
    ) -> std::io::Result<ModelEngine> {
        let persist: Persist = config.persist;
        let models: Vec<ModelDevice> = (0..channels)
            .map(|_| ModelDevice::start_with(model.clone(), persist))
            .collect();
        let queues = models
            .iter()
            .map(|m| (m.work_queue(), Box::new(m.portal()) as Box<dyn Portal>))
            .collect();
        Ok(ModelEngine {
            engine: DsaEngine::start(queues, config)?,
            models,
        })
    }

    /// The DSA engine itself (its per-channel counters: [`DsaEngine::stats`]).
    pub fn dsa(&self) -> &DsaEngine {
        &self.engine
    }

    /// The device models, one per channel.
    pub fn models(&self) -> &[ModelDevice] {
        &self.models
    }
}

impl Engine for ModelEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: MODEL_ENGINE_NAME,
            ..self.engine.info()
        }
    }

    unsafe fn try_submit(&self, channel: usize, batch: Batch) -> Result<u64, SubmitError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.engine.try_submit(channel, batch) }
    }

    fn queue_depth(&self, channel: usize) -> usize {
        self.engine.queue_depth(channel)
    }

    fn record(&self, channel: usize) -> RecordSnapshot {
        self.engine.record(channel)
    }

    fn suspend(&self, channel: usize) {
        self.engine.suspend(channel);
    }

    fn resume(&self, channel: usize) {
        self.engine.resume(channel);
    }

    fn is_suspended(&self, channel: usize) -> bool {
        self.engine.is_suspended(channel)
    }

    fn set_budget(&self, channel: usize, budget: Option<Budget>) -> bool {
        self.engine.set_budget(channel, budget)
    }

    fn renew_budget(&self, channel: usize, lapses_ns: u64) {
        self.engine.renew_budget(channel, lapses_ns);
    }

    fn budget(&self, channel: usize) -> Option<Budget> {
        self.engine.budget(channel)
    }

    fn worker_cpu(&self, channel: usize) -> Option<usize> {
        self.engine.worker_cpu(channel)
    }

    fn pauses(&self, channel: usize) -> Pauses {
        self.engine.pauses(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Descriptor, Flags, Op, Status};

    #[test]
    fn copies_on_the_model_and_calls_itself_the_model() {
        let e = ModelEngine::start(2, &ModelConfig::default(), DsaConfig::default()).unwrap();
        assert_eq!(e.info().name, MODEL_ENGINE_NAME);
        assert_eq!(e.info().channels, 2);
        let src: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(vec![Descriptor {
            op: Op::Copy {
                dst: dst.as_mut_ptr(),
                src: src.as_ptr(),
            },
            len: src.len(),
            flags: Flags::DURABLE,
        }]);
        // SAFETY: the buffers outlive the wait below.
        unsafe { e.try_submit(1, b) }.unwrap();
        assert_eq!(t.wait(1000).status, Status::Success);
        assert_eq!(dst, src);
        assert_eq!(e.models()[1].rejected(), 0);
    }
}
