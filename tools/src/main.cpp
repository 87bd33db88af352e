// `pararnn`: make-case | oracle | solve | verify | compare | env. Thin: parses with CLI11,
// calls the library, prints, and maps errors to exit codes (refused input: 2, with the
// library's message naming the argument, the rule and the value).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "commands.hpp"
#include "env_line.hpp"
#include "pararnn/core/errors.hpp"

int main(int argc, char** argv) {
  using namespace pararnn::tools;
  CLI::App app{"pararnn: parallel Newton RNN solver and its independent oracle"};
  app.require_subcommand(1);

  MakeCaseArgs mk;
  auto* make = app.add_subcommand("make-case", "generate a case file (cell parameters + input)");
  make->add_option("--cell", mk.cell, "gru | lstm | nlru | slstm | cfc | titans | hopfield | rwkv7 | m2rnn");
  make->add_option("--mix", mk.mix, "recurrent mix (diag; gru: head)");
  make->add_option("--beta", mk.beta, "inverse temperature (hopfield; default 1/sqrt(d_h))");
  make->add_option("--n-heads", mk.n_heads, "heads (head mixes; rwkv7, default 1; must divide --d-h)");
  make->add_option("--gate-mix", mk.gate_mix, "cfc: input | diag_h");
  make->add_option("--eps", mk.eps, "slstm: h = o c / (n + eps) (default 1e-6)");
  make->add_option("--k-dim", mk.k_dim, "rows K of the matrix state (m2rnn; required there)");
  make->add_option("--v-dim", mk.v_dim, "columns V of the matrix state (m2rnn; required there)");
  make->add_option("--batch", mk.batch);
  make->add_option("--time", mk.time);
  make->add_option("--d-in", mk.d_in);
  make->add_option("--d-h", mk.d_h, "hidden size (default 16; m2rnn: k_dim·v_dim, leave unset)");
  make->add_option("--dtype", mk.dtype, "f64 | f32 | f16 | bf16");
  make->add_option("--seed", mk.seed);
  make->add_option("--weight-std", mk.weight_std, "std of the recurrent parameters");
  make->add_option("--max-recurrent-norm", mk.max_recurrent_norm,
                   "clamp cap, a number or none (default: the cell's, 0.5; none for mix head)");
  make->add_option("--h0-std", mk.h0_std, "add a random h0 with this std");
  make->add_option("--cu-seqlens", mk.cu_seqlens, "packed case: 0,n1,...,N (needs --batch 1)");
  make->add_option("--out", mk.out)->required();

  SolveArgs sa;
  std::string trajectory;
  auto add_case = [&](CLI::App* cmd) { cmd->add_option("case", sa.case_path)->required(); };
  auto add_solver = [&](CLI::App* cmd) {
    cmd->add_option("--backend", sa.backend, "auto | eager | cpu | cuda");
    cmd->add_option("--max-iters", sa.max_iters, "fixed K, or none (K table + adaptive)");
  };
  auto add_judge = [&](CLI::App* cmd) {
    cmd->add_option("--json", sa.json, "write the report as JSON");
    cmd->add_option("--seed", sa.seed, "seed of the oracle's certified-chain sample");
    cmd->add_option("--certify-budget", sa.certify_budget, "chain-steps of the certifying unroll");
    cmd->add_option("--atol", sa.atol, "explicit agreement atol (default: the contract table)");
  };
  auto* oracle_cmd = app.add_subcommand("oracle", "high-precision sequential trajectory");
  add_case(oracle_cmd);
  oracle_cmd->add_option("--out", sa.out)->required();
  oracle_cmd->add_flag("--grad", sa.grad);
  oracle_cmd->add_option("--certify-budget", sa.certify_budget);
  auto* solve_cmd = app.add_subcommand("solve", "parallel Newton solve");
  add_case(solve_cmd);
  add_solver(solve_cmd);
  solve_cmd->add_option("--out", sa.out)->required();
  solve_cmd->add_flag("--grad", sa.grad);
  solve_cmd->add_flag("--recompute", sa.recompute, "with --grad: keep nothing of H*, re-solve it");
  auto* verify_cmd = app.add_subcommand("verify", "solver vs oracle: exit 0 Agree, 1 Disagree, 2 Inconclusive/refused");
  add_case(verify_cmd);
  add_solver(verify_cmd);
  add_judge(verify_cmd);
  verify_cmd->add_flag("--grad", sa.grad);
  verify_cmd->add_flag("--recompute", sa.recompute, "with --grad: the backward re-solves H*");
  auto* compare_cmd = app.add_subcommand("compare", "an external trajectory vs the oracle");
  add_case(compare_cmd);
  compare_cmd->add_option("--trajectory", trajectory, "safetensors file holding H")->required();
  add_judge(compare_cmd);
  KstarArgs ka;
  auto* kstar_cmd = app.add_subcommand("kstar", "measure K*(T), the smallest K that agrees with the oracle");
  kstar_cmd->add_option("--cell", ka.cell);
  kstar_cmd->add_option("--mix", ka.mix, "recurrent mix (gru: head; slstm: head, dense)");
  kstar_cmd->add_option("--n-heads", ka.n_heads, "heads (head mixes)");
  kstar_cmd->add_option("--dtype", ka.dtype);
  kstar_cmd->add_option("--T", ka.times, "comma-separated lengths, e.g. 32,64,...,131072");
  kstar_cmd->add_option("--seeds", ka.seeds);
  kstar_cmd->add_option("--batch", ka.batch);
  kstar_cmd->add_option("--d-in", ka.d_in);
  kstar_cmd->add_option("--d-h", ka.d_h);
  kstar_cmd->add_option("--k-dim", ka.k_dim, "m2rnn: rows K of the state");
  kstar_cmd->add_option("--v-dim", ka.v_dim, "m2rnn: columns V of the state");
  kstar_cmd->add_option("--k-limit", ka.k_limit);
  kstar_cmd->add_option("--weight-std", ka.weight_std);
  kstar_cmd->add_option("--max-recurrent-norm", ka.max_recurrent_norm);
  kstar_cmd->add_option("--json", ka.json);
  auto* env_cmd = app.add_subcommand("env", "one line: version, compiler, CUDA, GPU");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitInconclusiveOrRefused;
  }
  try {
    if (make->parsed()) return make_case(mk);
    if (kstar_cmd->parsed()) return kstar(ka);
    if (oracle_cmd->parsed()) return oracle(sa);
    if (solve_cmd->parsed()) return solve(sa);
    if (verify_cmd->parsed()) return verify(sa);
    if (compare_cmd->parsed()) return compare(sa, trajectory);
    if (env_cmd->parsed()) {
      std::cout << env_line() << "\n";
      return 0;
    }
  } catch (const pararnn::NewtonDivergenceError& e) {
    // The solver failed to produce the sequential answer: a disagreement, not a refusal.
    std::cerr << "pararnn: " << e.what() << "\n";
    return kExitDisagree;
  } catch (const pararnn::ContractViolation& e) {
    std::cerr << "pararnn: refused input: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const pararnn::CaseFileError& e) {
    std::cerr << "pararnn: bad case file: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const pararnn::UnsupportedPath& e) {
    std::cerr << "pararnn: unsupported: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const std::exception& e) {
    std::cerr << "pararnn: error: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  }
  return kExitInconclusiveOrRefused;
}
