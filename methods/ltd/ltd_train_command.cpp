// `specbed train ltd` (the depth and size policies, PPO) and `specbed train ltd-baselines` (the
// Disco, SpecDec++ and C2T classifiers) behind their flags. Checked by: tests/cli/ltd_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/ltd/ltd_classifier_trainer.h"
#include "methods/ltd/ltd_trainer.h"

namespace specbed::cli {
namespace {

// The flags both LTD trainers share (LtdTrainSetup's inputs, the beam width and the depth
// ceiling); `C` is LtdTrainConfig or LtdBaselineTrainConfig.
template <class C>
void AddLtdSetupFlags(CLI::App* cmd, C& c) {
  AddShownFlags(cmd, {{"-t,--target", c.target, "Target model"},
                      {"--head", c.head, "EAGLE-3 head (auto = the target's shipped head)"},
                      {"--dtype", c.dtype, "Target dtype"},
                      {"--device", c.device, "Target and head device: cpu, cuda or cuda:N"},
                      {"--prompts", c.prompts, "Prompt dataset"},
                      {"--train-from", c.train_from, "Training prompts: index >= this"},
                      {"--val-from", c.val_from, "Held-out prompts start here"},
                      {"--val-count", c.val_count, "Held-out prompts"},
                      {"-n,--max-new-tokens", c.max_new_tokens, "Tokens per generation"},
                      {"--top-k", c.top_k, "Beam width W"},
                      {"--max-depth", c.max_depth, "Most expansion rounds"}});
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
  AddShownFlags(cmd, {{"--depth-every", c.depth_every, "Ask pi_D after every n-th round"},
                      {"--size-step", c.size_step, "V = size_step * (a + 1)"},
                      {"--n-actions", c.n_actions, "Size actions"},
                      {"--depth-hidden", c.depth_hidden, "pi_D actor hidden widths"},
                      {"--size-hidden", c.size_hidden, "pi_V actor hidden widths"},
                      {"--critic-hidden", c.critic_hidden, "Critic hidden widths"},
                      {"--activation", c.activation, "tanh or relu"},
                      {"--partner-rounds-max", c.partner_rounds_max,
                       "Size stage: heuristic depth ~ U{1..this}"},
                      {"--partner-nodes", c.partner_nodes, "Depth stage: fixed V"},
                      {"--reward", c.reward, "throughput (spec) or tau (ablation)"},
                      {"--timing", c.timing, "measured or simulated (from the tables)"}});
  cmd->add_option("--tables", c.tables, "tables.json for --timing simulated (else measured)");
  AddShownFlags(cmd, {{"--size-steps", c.size_steps, "Episodes of the initial size stage"},
                      {"--depth-steps", c.depth_steps, "Decisions of the initial depth stage"},
                      {"--iter-steps", c.iter_steps, "Transitions per co-adaptation round"},
                      {"--iterations", c.iterations, "Co-adaptation rounds (size, depth, ...)"},
                      {"--n-steps", c.ppo.n_steps, "PPO rollout length"},
                      {"--minibatch", c.ppo.minibatch, "PPO minibatch"},
                      {"--epochs", c.ppo.epochs, "PPO epochs per update"},
                      {"--lr", c.ppo.lr, "Peak learning rate"},
                      {"--ent-coef", c.ppo.ent_coef, "Entropy coefficient"},
                      {"--gamma-size", c.gamma_size, "Discount, size policy"},
                      {"--gamma-depth", c.gamma_depth, "Discount, depth policy"},
                      {"--eval-every", c.eval_every, "Updates between validations"},
                      {"--seed", c.ppo.seed, "Seed"},
                      {"--threads", c.threads, "Threads"}});
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
  AddShownFlags(cmd, {{"--nodes", c.nodes, "Verified drafts per step while collecting (V)"},
                      {"--disco-hidden", c.disco_hidden, "Disco FFN width"},
                      {"--specdec-hidden", c.specdec_hidden, "SpecDec++ FFN width"},
                      {"--c2t-hidden", c.c2t_hidden, "C2T FFN width"},
                      {"--disco-epochs", c.disco_epochs, "Disco epochs"},
                      {"--specdec-epochs", c.specdec_epochs, "SpecDec++ epochs"},
                      {"--c2t-epochs", c.c2t_epochs, "C2T epochs"},
                      {"--batch", c.batch, "Minibatch rows"},
                      {"--lr", c.lr, "AdamW learning rate"},
                      {"--weight-decay", c.weight_decay, "AdamW weight decay"},
                      {"--seed", c.seed, "Seed (init, balancing, order)"},
                      {"--threads", c.threads, "Threads"}});
}

}  // namespace

void AddLtdTrainCommands(CLI::App* train) {
  AddTrainLtd(train);
  AddTrainLtdBaselines(train);
}

}  // namespace specbed::cli
