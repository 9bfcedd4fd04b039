// `specbed train <drafter>`: the drafter trainers behind one command each — draft-lm (a small
// draft LM distilled from a target for speculative sampling), eagle3, medusa, specblock, dflash,
// jetspec, hrad, ltd and ltd-baselines (methods/common/train/README.md and each method's README).
// Resumable: rerunning with the same settings continues an unfinished run in -o/--output.
// `--device` (every trainer but ltd / ltd-baselines) is checked first, before anything loads.
// Checked by: tests/train/train_cli_test.cpp (exit codes, resume, mismatch message),
// tests/train/train_test.cpp (the trainer it calls) and tests/cli/ltd_cli_test.cpp (`train ltd`).
#include <cstdio>
#include <memory>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "methods/common/train/draft_lm_trainer.h"
#include "methods/dflash/dflash_trainer.h"
#include "methods/eagle3/eagle3_trainer.h"
#include "methods/ltd/ltd_classifier_trainer.h"
#include "methods/ltd/ltd_trainer.h"
#include "methods/medusa/medusa_trainer.h"
#include "methods/specblock/specblock_trainer.h"
#include "methods/specbranch/hrad_trainer.h"

namespace specbed::cli {
namespace {

using TrainDraftLmOptions = TrainerFlags<DraftLmTrainConfig>;

void KeepLargeBlocksInHeap() {
#if defined(__GLIBC__)
  // glibc serves blocks above 128 KiB with mmap and unmaps them on free, so every training step
  // would page-fault its multi-MiB activations in afresh; keeping blocks up to 32 MiB (the
  // largest threshold glibc accepts) in the heap makes a step about a third faster.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

// --n-sequences, --n-eval-sequences (described by `eval_help`), --seq-len and --temperature of
// the trainers that sample their data from the target (train draft-lm, hrad).
template <class Config>
void AddSampledDataFlags(CLI::App* cmd, Config& c, const std::string& eval_help) {
  cmd->add_option("--n-sequences", c.n_sequences, "Training sequences sampled from the target")
      ->capture_default_str();
  cmd->add_option("--n-eval-sequences", c.n_eval_sequences, eval_help)->capture_default_str();
  cmd->add_option("--seq-len", c.seq_len, "Tokens per sequence (BOS included)")
      ->capture_default_str();
  cmd->add_option("--temperature", c.temperature, "Sampling temperature of the data")
      ->capture_default_str();
}

void RunTrainDraftLm(const TrainDraftLmOptions& o) {
  TrainDevice(o.config.optim, "train draft-lm");  // before the target or the data load
  KeepLargeBlocksInHeap();
  const DraftLmTrainResult r = TrainDraftLm(o.config, o.out, o.run);
  if (!r.finished) {
    PrintStoppedAtStep(r.step, o.config.optim.steps);
    return;
  }
  std::printf(
      "%s: %lld steps, final train KL %.4f; held-out KL %.4f, top-1 agreement %.4f, expected "
      "acceptance (T=1) %.4f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(r.step), r.final_loss, r.eval_kl, r.top1_agreement,
      r.expected_acceptance, r.train_seconds);
}

// The regen-data flags of the head trainers that read target features (train eagle3, dflash,
// jetspec): --max-len, --n-eval, --features, --feature-dtype.
void AddRegenDataFlags(CLI::App* cmd, int64_t& max_len, int64_t& n_eval, std::string& features,
                       std::string& feature_dtype) {
  cmd->add_option("--max-len", max_len, "Crop training sequences to this many tokens")
      ->capture_default_str();
  cmd->add_option("--n-eval", n_eval, "Held-out sequences (the last ones of --data)")
      ->capture_default_str();
  cmd->add_option("--features", features,
                  "Target features: online (run the target each step) or disk (cache under "
                  "OUT/work/features)")
      ->check(CLI::IsMember({"online", "disk"}))
      ->capture_default_str();
  cmd->add_option("--feature-dtype", feature_dtype,
                  "Disk cache storage dtype: float32, bfloat16, float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
}

// The flags every head trainer on a `specbed regen` file ends with: AddRegenDataFlags, then
// AddOptimFlags.
template <class Config>
void AddRegenDataAndOptimFlags(CLI::App* cmd, TrainerFlags<Config>& o) {
  Config& c = o.config;
  AddRegenDataFlags(cmd, c.max_len, c.n_eval, c.features, c.feature_dtype);
  AddOptimFlags(cmd, c.optim, o.run);
}

// Runs a head trainer whose held-out figures include a chain tau estimate (train eagle3, medusa,
// dflash, jetspec) and prints "OUT: N steps, final train loss L; held-out <loss> E, <top1> top-1
// A, chain tau estimate T; train S s".
template <class Config, class Train>
void RunChainTauTrainer(const TrainerFlags<Config>& o, Train train, const std::string& who,
                        const char* loss, const char* top1) {
  TrainDevice(o.config.optim, who);  // before the target or the data load
  KeepLargeBlocksInHeap();
  const auto r = TrainUnlessStopped(o, train);
  if (!r) return;
  const TrainLoopResult& loop = r->loop;
  std::printf(
      "%s: %lld steps, final train loss %.4f; held-out %s %.4f, %s top-1 %.4f, chain tau "
      "estimate %.3f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(loop.step), loop.final_loss, loss, loop.eval.loss, top1,
      loop.eval.acceptance_proxy, loop.eval.extra["chain_tau_estimate"].get<double>(),
      loop.train_seconds);
}

using TrainEagle3Options = TrainerFlags<Eagle3TrainConfig>;

void RunTrainEagle3(const TrainEagle3Options& o) {
  RunChainTauTrainer(o, TrainEagle3, "train eagle3", "TTT loss", "step-0");
}

// -o/--output, --data, -t/--target, --dtype of the trainers that read a `specbed regen` file
// (with their old spellings --out and --model).
void AddRegenTrainerFlags(CLI::App* cmd, std::string& out, std::string& data, std::string& target,
                          std::string& dtype) {
  AddOutputFlag(cmd, out, "Output directory (checkpoint, train_log.db, work/)");
  cmd->add_option("--data", data, "Training data: a `specbed regen` file")->required();
  AddTargetFlags(cmd, target, dtype);
}

void AddTrainEagle3(CLI::App* train) {
  auto [cmd, o] =
      AddSubcommand(train, "eagle3", RunTrainEagle3,
                    "Train an EAGLE-3 head with training-time test on a `specbed regen` file -> "
                    "OUT/config.json + model.safetensors (published EAGLE-3 layout); resumable");
  Eagle3TrainConfig& c = o->config;
  c.optim = DefaultEagle3Optim();
  AddRegenTrainerFlags(cmd, o->out, c.data, c.target, c.dtype);
  cmd->add_option("--aux-layers", c.aux_layers,
                  "Three target hidden-state ids fused by the head (HF numbering); default "
                  "{2, L/2, L-3}")
      ->expected(3);
  cmd->add_option("--draft-vocab", c.draft_vocab,
                  "Draft vocabulary size (most frequent response tokens; clipped to the target's)")
      ->capture_default_str();
  cmd->add_option("--ttt-steps", c.ttt_steps, "Unrolled training-time-test steps")
      ->capture_default_str();
  cmd->add_option("--ttt-decay", c.ttt_decay, "Loss weight decay^k of TTT step k")
      ->capture_default_str();
  cmd->add_option("--ttt-loss-norm", c.ttt_loss_norm,
                  "Per-step loss normalisation: counted (by the step's supervised positions) or "
                  "all (by every position of the batch, as the EAGLE-3 reference)")
      ->check(CLI::IsMember({"counted", "all"}))
      ->capture_default_str();
  AddRegenDataAndOptimFlags(cmd, *o);
}

using TrainMedusaOptions = TrainerFlags<MedusaTrainConfig>;

void RunTrainMedusa(const TrainMedusaOptions& o) {
  RunChainTauTrainer(o, TrainMedusa, "train medusa", "loss", "head-0");
}

void AddTrainMedusa(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(
      train, "medusa", RunTrainMedusa,
      "Train Medusa-1 heads (target frozen) on a `specbed regen` file -> OUT/config.json + "
      "medusa_lm_head.safetensors (published Medusa layout); resumable");
  MedusaTrainConfig& c = o->config;
  c.optim = DefaultMedusaOptim();
  cmd->add_option("-o,--output", o->out, "Output directory (checkpoint, train_log.db, work/)")
      ->required();
  cmd->add_option("--data", c.data, "Training data: a `specbed regen` file")->required();
  cmd->add_option("-t,--target", c.target, "Target model (name or path; float32)")
      ->capture_default_str();
  cmd->add_option("--heads", c.num_heads, "Medusa heads K (head k predicts token t+k+2)")
      ->capture_default_str();
  cmd->add_option("--layers", c.num_layers, "Residual blocks per head")->capture_default_str();
  cmd->add_option("--decay", c.decay, "Loss weight decay^k of head k")->capture_default_str();
  AddRegenDataAndOptimFlags(cmd, *o);
}

using TrainSpecBlockOptions = TrainerFlags<SpecBlockTrainConfig>;

void RunTrainSpecBlock(const TrainSpecBlockOptions& o) {
  TrainDevice(o.config.optim, "train specblock");  // before the target or the data load
  KeepLargeBlocksInHeap();
  const auto r = TrainUnlessStopped(o, TrainSpecBlock);
  if (!r) return;
  std::printf(
      "%s: %lld steps, %lld parameters, final train loss %.4f; held-out loss %.4f, "
      "slot-1 top-1 %.4f, block chain tau estimate %.3f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(r->loop.step), static_cast<long long>(r->parameters),
      r->loop.final_loss, r->loop.eval.loss, r->loop.eval.acceptance_proxy,
      r->loop.eval.extra["block_chain_tau_estimate"].get<double>(), r->loop.train_seconds);
}

void AddTrainSpecBlock(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(train, "specblock", RunTrainSpecBlock,
                                "Train a SpecBlock drafter (valid-prefix loss, cross-block "
                                "chaining, rank head after --rank-warmup steps) on a `specbed "
                                "regen` file -> OUT/config.json + model.safetensors; resumable");
  SpecBlockTrainConfig& c = o->config;
  c.optim = DefaultSpecBlockOptim();
  AddRegenTrainerFlags(cmd, o->out, c.data, c.target, c.dtype);
  cmd->add_option("--aux-layers", c.aux_layers,
                  "Three target hidden-state ids (low, mid, top; HF numbering); default "
                  "{2, L/2, L-3}")
      ->expected(3);
  cmd->add_option("--draft-vocab", c.draft_vocab, "Draft vocabulary size")->capture_default_str();
  cmd->add_option("--block-size", c.block_size, "K: slots per block")->capture_default_str();
  cmd->add_option("--layers", c.layers, "L: drafter decoder layers")->capture_default_str();
  cmd->add_option("--shifts", c.shifts, "W_shift count: L or L-1 (-1 = L)")->capture_default_str();
  cmd->add_option("--rank-hidden", c.rank_hidden, "Rank-head MLP width")->capture_default_str();
  cmd->add_option("--blocks", c.blocks, "Chained blocks in training (1 or 2)")
      ->capture_default_str();
  cmd->add_option("--rank-warmup", c.rank_warmup,
                  "Steps before the rank-head loss is on (-1 = 3/8 of --steps; must be < --steps)")
      ->capture_default_str();
  cmd->add_option("--valid-prefix", c.valid_prefix, "Valid-prefix mask (false: the ablation)")
      ->capture_default_str();
  cmd->add_option("--slot-norm-floor", c.slot_norm_floor,
                  "Slot k's loss is divided by max(N_k, floor * N_1); 0 = the paper's per-slot "
                  "normalisation")
      ->capture_default_str();
  AddRegenDataAndOptimFlags(cmd, *o);
}

struct TrainDflashOptions : TrainerFlags<DflashTrainConfig> {
  std::string loss;
};

void RunTrainDflash(const TrainDflashOptions& o) {
  TrainDflashOptions parsed = o;
  parsed.config.loss.kind = ParseDflashLossKind(o.loss);
  RunChainTauTrainer(parsed, TrainDflash, "train " + o.config.variant, "loss", "block-row-1");
}

// `train dflash` and `train jetspec`: one trainer, the variant sets the defaults.
void AddTrainDflash(CLI::App* train, const std::string& variant) {
  const bool jetspec = variant == "jetspec";
  auto [cmd, o] = AddSubcommand(
      train, variant, RunTrainDflash,
      jetspec ? "Train a JetSpec causal block head (forward-KL distillation on the target's "
                "logits, random anchors) on a `specbed regen` file -> OUT/config.json + "
                "model.safetensors (DFlash layout, specbed_causal); resumable"
              : "Train a DFlash block-diffusion head (random anchors, cross-entropy weighted "
                "exp(-(k-1)/gamma)) on a `specbed regen` file -> OUT/config.json + "
                "model.safetensors (published DFlash layout); resumable");
  DflashTrainConfig& c = o->config;
  c = DefaultDflashTrainConfig(variant);
  o->loss = DflashLossKindName(c.loss.kind);
  AddRegenTrainerFlags(cmd, o->out, c.data, c.target, c.dtype);
  cmd->add_option("--block-size", c.block_size, "Block size B (bonus token + B-1 masks)")
      ->capture_default_str();
  cmd->add_option("--layers", c.layers, "Draft decoder layers")->capture_default_str();
  OldSpellings(cmd,
               cmd->add_option("--heads", c.heads, "Draft attention heads (0 = the target's)")
                   ->capture_default_str(),
               {"--n-heads"});
  cmd->add_option("--kv-heads", c.kv_heads,
                  "Draft KV heads (0 = --heads when given, else the target's)")
      ->capture_default_str();
  cmd->add_option("--head-dim", c.head_dim, "Draft head dimension (0 = the target's)")
      ->capture_default_str();
  cmd->add_option("--intermediate", c.intermediate, "Draft SwiGLU width (0 = the target's)")
      ->capture_default_str();
  cmd->add_option("--target-layers", c.target_layers,
                  "0-based target decoder layers whose outputs are fused; default: DFlash's rule "
                  "(evenly spaced from 1 to L-3)");
  cmd->add_option("--mask-token", c.mask_token, "Target vocabulary id used as MASK")
      ->capture_default_str();
  cmd->add_flag("--causal,!--bidirectional", c.causal,
                "Causal attention inside the block (JetSpec) instead of bidirectional (DFlash)")
      ->capture_default_str();
  cmd->add_option("--anchors", c.anchors, "Random anchors (blocks) per sequence per step")
      ->capture_default_str();
  cmd->add_option("--loss", o->loss, "Objective: ce (hard labels), forward_kl, reverse_kl")
      ->check(CLI::IsMember({"ce", "forward_kl", "reverse_kl"}))
      ->capture_default_str();
  cmd->add_option("--gamma", c.loss.gamma,
                  "Per-position loss weight exp(-(k-1)/gamma); 0 = uniform")
      ->capture_default_str();
  cmd->add_option("--distill-temperature", c.loss.temperature,
                  "Distillation temperature of the KL losses")
      ->capture_default_str();
  AddRegenDataAndOptimFlags(cmd, *o);
}

}  // namespace

using TrainHradOptions = TrainerFlags<HradTrainConfig>;

void RunTrainHrad(const TrainHradOptions& o) {
  TrainDevice(o.config.optim, "train hrad");  // before the target or the data load
  const auto r = TrainUnlessStopped(o, TrainHrad);
  if (!r) return;
  std::printf("%s: %lld train rows, %lld held-out rows (data %.1f s, train %.1f s); held-out %s\n",
              o.out.c_str(), static_cast<long long>(r->n_train), static_cast<long long>(r->n_eval),
              r->data_seconds, r->loop.train_seconds, r->evaluation.dump().c_str());
}

void AddTrainHrad(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(
      train, "hrad", RunTrainHrad,
      "Train SpecBranch's H-RAD predictor (3-class MLP on target features) from draft/target "
      "agreement on sequences sampled from the target -> OUT/config.json + model.safetensors");
  o->config.optim = DefaultHradOptim();
  HradTrainConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output directory");
  AddTargetFlag(cmd, c.target);
  cmd->add_option("--drafter", c.drafter, "SpS draft LM (auto = the target's shipped one)")
      ->capture_default_str();
  cmd->add_option("--gamma", c.gamma, "Draft length of the labels (= specbranch gamma_max)")
      ->capture_default_str();
  cmd->add_option("--feature-layers", c.feature_layers, "K: last target layers read")
      ->capture_default_str();
  AddSampledDataFlags(cmd, c, "Held-out sequences");
  cmd->add_option("--data-seed", c.data_seed, "Seed of the sampled sequences")
      ->capture_default_str();
  cmd->add_option("--dropout", c.dropout, "Dropout after each hidden layer")->capture_default_str();
  AddOptimFlags(cmd, c.optim, o->run);
}

// The flags both LTD trainers share (LtdTrainSetup's inputs, the beam width and the depth
// ceiling); `C` is LtdTrainConfig or LtdBaselineTrainConfig.
template <class C>
void AddLtdSetupFlags(CLI::App* cmd, C& c) {
  cmd->add_option("-t,--target", c.target, "Target model")->capture_default_str();
  cmd->add_option("--head", c.head, "EAGLE-3 head (auto = the target's shipped head)")
      ->capture_default_str();
  cmd->add_option("--dtype", c.dtype, "Target dtype")->capture_default_str();
  cmd->add_option("--device", c.device, "Target and head device: cpu, cuda or cuda:N")
      ->capture_default_str();
  cmd->add_option("--prompts", c.prompts, "Prompt dataset")->capture_default_str();
  cmd->add_option("--train-from", c.train_from, "Training prompts: index >= this")
      ->capture_default_str();
  cmd->add_option("--val-from", c.val_from, "Held-out prompts start here")->capture_default_str();
  cmd->add_option("--val-count", c.val_count, "Held-out prompts")->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", c.max_new_tokens, "Tokens per generation")
      ->capture_default_str();
  cmd->add_option("--top-k", c.top_k, "Beam width W")->capture_default_str();
  cmd->add_option("--max-depth", c.max_depth, "Most expansion rounds")->capture_default_str();
}

struct TrainLtdOptions {
  LtdTrainConfig config = DefaultLtdTrainConfig();
  std::string out;
  int64_t stop_after_stages = 0;
};

void RunTrainLtd(const TrainLtdOptions& o) {
  const LtdTrainResult r = TrainLtd(o.config, o.out, true, o.stop_after_stages);
  if (!r.finished) {
    PrintStopped("after " + std::to_string(r.stages_done) + " stages");
    return;
  }
  std::printf("%s: %s\n", o.out.c_str(), r.summary["final_validation"].dump().c_str());
}

void AddTrainLtd(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(train, "ltd", RunTrainLtd,
                                "Train LTD's depth and size policies with PPO on the real target + "
                                "EAGLE-3 head (reward = accepted tokens / measured cycle time) -> "
                                "OUT/depth, OUT/size, tables.json, train_log.db; resumable");
  LtdTrainConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output directory");
  AddLtdSetupFlags(cmd, c);
  cmd->add_option("--depth-every", c.depth_every, "Ask pi_D after every n-th round")
      ->capture_default_str();
  cmd->add_option("--size-step", c.size_step, "V = size_step * (a + 1)")->capture_default_str();
  cmd->add_option("--n-actions", c.n_actions, "Size actions")->capture_default_str();
  cmd->add_option("--depth-hidden", c.depth_hidden, "pi_D actor hidden widths")
      ->capture_default_str();
  cmd->add_option("--size-hidden", c.size_hidden, "pi_V actor hidden widths")
      ->capture_default_str();
  cmd->add_option("--critic-hidden", c.critic_hidden, "Critic hidden widths")
      ->capture_default_str();
  cmd->add_option("--activation", c.activation, "tanh or relu")->capture_default_str();
  cmd->add_option("--partner-rounds-max", c.partner_rounds_max,
                  "Size stage: heuristic depth ~ U{1..this}")
      ->capture_default_str();
  cmd->add_option("--partner-nodes", c.partner_nodes, "Depth stage: fixed V")
      ->capture_default_str();
  cmd->add_option("--reward", c.reward, "throughput (spec) or tau (ablation)")
      ->capture_default_str();
  cmd->add_option("--timing", c.timing, "measured or simulated (from the tables)")
      ->capture_default_str();
  cmd->add_option("--tables", c.tables, "tables.json for --timing simulated (else measured)");
  cmd->add_option("--size-steps", c.size_steps, "Episodes of the initial size stage")
      ->capture_default_str();
  cmd->add_option("--depth-steps", c.depth_steps, "Decisions of the initial depth stage")
      ->capture_default_str();
  cmd->add_option("--iter-steps", c.iter_steps, "Transitions per co-adaptation round")
      ->capture_default_str();
  cmd->add_option("--iterations", c.iterations, "Co-adaptation rounds (size, depth, ...)")
      ->capture_default_str();
  cmd->add_option("--n-steps", c.ppo.n_steps, "PPO rollout length")->capture_default_str();
  cmd->add_option("--minibatch", c.ppo.minibatch, "PPO minibatch")->capture_default_str();
  cmd->add_option("--epochs", c.ppo.epochs, "PPO epochs per update")->capture_default_str();
  cmd->add_option("--lr", c.ppo.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--ent-coef", c.ppo.ent_coef, "Entropy coefficient")->capture_default_str();
  cmd->add_option("--gamma-size", c.gamma_size, "Discount, size policy")->capture_default_str();
  cmd->add_option("--gamma-depth", c.gamma_depth, "Discount, depth policy")->capture_default_str();
  cmd->add_option("--eval-every", c.eval_every, "Updates between validations")
      ->capture_default_str();
  cmd->add_option("--seed", c.ppo.seed, "Seed")->capture_default_str();
  cmd->add_option("--threads", c.threads, "Threads")->capture_default_str();
  cmd->add_option("--stop-after-stages", o->stop_after_stages,
                  "Stop after N stages (resume later)");
}

struct TrainLtdBaselinesOptions {
  LtdBaselineTrainConfig config;
  std::string out;
};

void RunTrainLtdBaselines(const TrainLtdBaselinesOptions& o) {
  const LtdBaselineTrainResult r = TrainLtdBaselines(o.config, o.out);
  std::printf("%s: %s\n", o.out.c_str(), r.summary.dump().c_str());
}

void AddTrainLtdBaselines(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(
      train, "ltd-baselines", RunTrainLtdBaselines,
      "Train the Disco, SpecDec++ and C2T classifiers of the LTD paper's table on labelled EAGLE-3 "
      "drafts (balanced, AdamW) -> OUT/disco, OUT/specdecpp, OUT/c2t");
  LtdBaselineTrainConfig& c = o->config;
  cmd->add_option("-o,--output", o->out, "Output directory")->required();
  AddLtdSetupFlags(cmd, c);
  cmd->add_option("--nodes", c.nodes, "Verified drafts per step while collecting (V)")
      ->capture_default_str();
  cmd->add_option("--disco-hidden", c.disco_hidden, "Disco FFN width")->capture_default_str();
  cmd->add_option("--specdec-hidden", c.specdec_hidden, "SpecDec++ FFN width")
      ->capture_default_str();
  cmd->add_option("--c2t-hidden", c.c2t_hidden, "C2T FFN width")->capture_default_str();
  cmd->add_option("--disco-epochs", c.disco_epochs, "Disco epochs")->capture_default_str();
  cmd->add_option("--specdec-epochs", c.specdec_epochs, "SpecDec++ epochs")->capture_default_str();
  cmd->add_option("--c2t-epochs", c.c2t_epochs, "C2T epochs")->capture_default_str();
  cmd->add_option("--batch", c.batch, "Minibatch rows")->capture_default_str();
  cmd->add_option("--lr", c.lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--seed", c.seed, "Seed (init, balancing, order)")->capture_default_str();
  cmd->add_option("--threads", c.threads, "Threads")->capture_default_str();
}

void AddTrainCommand(CLI::App& app) {
  CLI::App* train = app.add_subcommand("train", "Train drafters (see methods/common/train)");
  train->require_subcommand(1);

  auto [cmd, o] =
      AddSubcommand(train, "draft-lm", RunTrainDraftLm,
                    "Distil a small llama2.c-shape draft LM from a target (forward KL on sequences "
                    "sampled from the target) -> OUT/config.json + model.safetensors; resumable");
  DraftLmTrainConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output directory (checkpoint, log, work/ cache)");
  AddTargetFlags(cmd, c.target, c.dtype);
  cmd->add_option("--layers", c.layers, "Draft layers")->capture_default_str();
  cmd->add_option("--dim", c.dim, "Draft hidden size")->capture_default_str();
  OldSpellings(
      cmd, cmd->add_option("--heads", c.n_heads, "Draft attention heads")->capture_default_str(),
      {"--n-heads"});
  OldSpellings(cmd,
               cmd->add_option("--kv-heads", c.n_kv_heads, "Draft KV heads (0 = --heads)")
                   ->capture_default_str(),
               {"--n-kv-heads"});
  cmd->add_option("--hidden-dim", c.hidden_dim, "Draft SwiGLU width (0 = 8/3 dim, rounded to 16)")
      ->capture_default_str();
  cmd->add_option("--max-seq-len", c.max_seq_len, "Draft context length (0 = the target's)")
      ->capture_default_str();
  AddSampledDataFlags(cmd, c, "Held-out sequences for the final agreement figures");
  AddOptimFlags(cmd, c.optim, o->run);
  AddTrainEagle3(train);
  AddTrainMedusa(train);
  AddTrainSpecBlock(train);
  AddTrainDflash(train, "dflash");
  AddTrainDflash(train, "jetspec");
  AddTrainHrad(train);
  AddTrainLtd(train);
  AddTrainLtdBaselines(train);
}

}  // namespace specbed::cli
