// Op cases: the op table, reading and validation (op_case.hpp).
#include "pararnn/core/op_case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "pararnn/core/errors.hpp"
#include "pararnn/core/random.hpp"

namespace pararnn {
namespace {

// fla's argument names (fla.ops: chunk_gla / fused_recurrent_gla, chunk_simple_gla,
// chunk_delta_rule, chunk_gated_delta_rule, chunk_dplr_delta_rule, chunk_rwkv7).
const std::vector<OpSpec>& table() {
  using enum OpInputShape;
  static const std::vector<OpSpec> specs = {
      {OpKind::gla, "gla", "fla", {{"q", key}, {"k", key}, {"v", value}, {"g", key}}},
      {OpKind::simple_gla, "simple_gla", "fla", {{"q", key}, {"k", key}, {"v", value}, {"g", head_scalar}}},
      {OpKind::delta_rule, "delta_rule", "fla", {{"q", key}, {"k", key}, {"v", value}, {"beta", head_scalar}}, true},
      {OpKind::gated_delta_rule, "gated_delta_rule", "fla",
       {{"q", key}, {"k", key}, {"v", value}, {"g", head_scalar}, {"beta", head_scalar}}, true},
      {OpKind::dplr_delta_rule, "dplr_delta_rule", "fla",
       {{"q", key}, {"k", key}, {"v", value}, {"a", key}, {"b", key}, {"gk", key}}},
      {OpKind::rwkv7, "rwkv7", "fla", {{"r", key}, {"w", key}, {"k", key}, {"v", value}, {"a", key}, {"b", key}}, false, true},
      {OpKind::selective_scan, "selective_scan", "mamba_ssm",
       {{"u", channel_time}, {"delta", channel_time}, {"A", channel_state, false, true}, {"B", group_state_time},
        {"C", group_state_time}, {"D", per_head, true, true}, {"z", channel_time, true}, {"delta_bias", per_head, true, true}},
       false, true, "out", "last_state", "", false},
      {OpKind::ssd, "ssd", "mamba_ssm",
       {{"x", value}, {"dt", head_scalar}, {"A", per_head, false, true}, {"B", time_group_state}, {"C", time_group_state},
        {"D", per_head, true, true}, {"z", value, true}, {"dt_bias", per_head, true, true}},
       false, true, "out", "final_states", "initial_states", true},
  };
  return specs;
}

bool absent_word(const std::string& word) { return word.empty() || word == "None" || word == "none"; }

std::optional<std::string> meta(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata.find(key);
  if (it == file.metadata.end() || absent_word(it->second)) return std::nullopt;
  return it->second;
}

bool meta_bool(const SafetensorsFile& file, const std::string& key, bool fallback) {
  const auto word = meta(file, key);
  if (!word) return fallback;
  if (*word == "True" || *word == "true" || *word == "1") return true;
  if (*word == "False" || *word == "false" || *word == "0") return false;
  throw ContractViolation(fmt::format("metadata '{}'", key), "must be True or False (as str() of a Python bool)",
                          *word);
}

void check_shape(const std::filesystem::path& path, const std::string& name, const Tensor& t, const Shape& want) {
  if (t.shape() != want)
    throw ContractViolation(fmt::format("{}: tensor '{}'", path.string(), name),
                            fmt::format("must have shape {}", shape_string(want)), shape_string(t.shape()));
}

std::vector<std::int64_t> read_cu_seqlens(const std::filesystem::path& path, const Tensor& cu, std::int64_t total) {
  const std::string argument = fmt::format("{}: tensor 'cu_seqlens'", path.string());
  if (cu.dtype() != DType::i32 && cu.dtype() != DType::i64)
    throw ContractViolation(argument, "must be int32 or int64", dtype_name(cu.dtype()));
  if (cu.dim() != 1 || cu.numel() < 2)
    throw ContractViolation(argument, "must be 1-D with at least 2 entries", shape_string(cu.shape()));
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < cu.numel(); ++i) v.push_back(static_cast<std::int64_t>(cu.load({i})));
  if (v.front() != 0) throw ContractViolation(argument, "must start at 0", std::to_string(v.front()));
  if (v.back() != total)
    throw ContractViolation(argument, fmt::format("must end at the packed length T = {}", total), std::to_string(v.back()));
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1])
      throw ContractViolation(argument, "must be strictly increasing",
                              fmt::format("entry {} = {} after {}", i, v[i], v[i - 1]));
  return v;
}

}  // namespace

const std::vector<OpSpec>& op_specs() { return table(); }

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpSpec& s : table()) names.emplace_back(s.name);
  return names;
}

const OpSpec& op_spec(std::string_view name) {
  for (const OpSpec& s : table())
    if (s.name == name) return s;
  throw ContractViolation("op", fmt::format("must be one of {}", fmt::join(op_names(), ", ")), name);
}

DType OpCase::dtype() const { return input(op_spec(op).inputs.front().name).dtype(); }

const Tensor& OpCase::input(std::string_view name) const {
  const auto it = inputs.find(std::string(name));
  if (it == inputs.end()) throw ContractViolation("op case", fmt::format("has no input '{}'", name), op);
  return it->second;
}

std::vector<OpCase::Sequence> OpCase::sequences() const {
  std::vector<Sequence> out;
  if (cu_seqlens) {
    for (std::int64_t i = 0; i + 1 < cu_seqlens->numel(); ++i)
      out.push_back({0, static_cast<std::int64_t>(cu_seqlens->load({i})),
                     static_cast<std::int64_t>(cu_seqlens->load({i + 1}))});
  } else {
    for (std::int64_t b = 0; b < batch; ++b) out.push_back({b, 0, time});
  }
  return out;
}

std::int64_t OpCase::sequence_count() const { return cu_seqlens ? cu_seqlens->numel() - 1 : batch; }
Shape OpCase::o_shape() const {
  if (kind == OpKind::selective_scan) return {batch, heads, time};
  return {batch, time, heads, v_dim};
}
Shape OpCase::final_state_shape() const {
  if (kind == OpKind::selective_scan) return {batch, heads, k_dim};
  if (kind == OpKind::ssd) return {sequence_count(), heads, v_dim, k_dim};
  return {sequence_count(), heads, k_dim, v_dim};
}

bool is_op_file(const SafetensorsFile& file) { return file.metadata.contains("op"); }

OpCase op_case_from_file(const SafetensorsFile& file, const std::filesystem::path& path) {
  const std::string where = path.string();
  if (!is_op_file(file)) throw ContractViolation(fmt::format("{}: metadata 'op'", where), "is required for an op case", "absent");
  if (file.metadata.contains("cell"))
    throw ContractViolation(fmt::format("{}: metadata", where), "must name either 'op' or 'cell', not both",
                            fmt::format("op={}, cell={}", file.metadata.at("op"), file.metadata.at("cell")));
  OpCase c;
  c.op = file.metadata.at("op");
  const OpSpec& spec = op_spec(c.op);
  c.kind = spec.kind;
  c.metadata = file.metadata;
  if (meta_bool(file, "head_first", false))
    throw ContractViolation(fmt::format("{}: metadata 'head_first'", where),
                            "must be False: op cases are [B, T, H, ...] (fla's default layout since 0.2)", "True");
  std::set<std::string> expected;
  for (const OpInputSpec& in : spec.inputs) {
    const auto it = file.tensors.find(std::string(in.name));
    if (it == file.tensors.end() && in.optional) continue;
    if (it == file.tensors.end())
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, in.name), fmt::format("is required by op {}", c.op), "absent");
    c.inputs.emplace(std::string(in.name), it->second);
    expected.emplace(in.name);
  }
  // Dimensions: fla from the first input [B, T, H, K] and v; selective_scan from u [B, D, L],
  // A [D, N] and B; ssd from x [B, L, H, P] and B [B, L, G, N].
  const auto need_dim = [&](const char* name, std::int64_t dims, const char* layout) -> const Tensor& {
    const Tensor& t = c.inputs.at(name);
    if (t.dim() != dims && !(spec.kind == OpKind::selective_scan && std::string_view(name) == "B" && t.dim() == 3))
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, name), fmt::format("must be {}-D {}", dims, layout),
                              shape_string(t.shape()));
    return t;
  };
  if (spec.kind == OpKind::selective_scan) {
    const Tensor& u = need_dim("u", 3, "[B, D, L]");
    c.batch = u.size(0);
    c.heads = u.size(1);
    c.time = u.size(2);
    c.k_dim = need_dim("A", 2, "[D, N]").size(1);
    c.v_dim = 1;
    const Tensor& b = need_dim("B", 4, "[B, G, N, L]");
    c.groups = b.dim() == 4 ? b.size(1) : 1;
  } else if (spec.kind == OpKind::ssd) {
    const Tensor& x = need_dim("x", 4, "[B, L, H, P]");
    c.batch = x.size(0);
    c.time = x.size(1);
    c.heads = x.size(2);
    c.v_dim = x.size(3);
    const Tensor& b = need_dim("B", 4, "[B, L, G, N]");
    c.groups = b.size(2);
    c.k_dim = b.size(3);
  } else {
    const Tensor& first = need_dim(spec.inputs.front().name.data(), 4, "[B, T, H, K]");
    c.batch = first.size(0);
    c.time = first.size(1);
    c.heads = first.size(2);
    c.k_dim = first.size(3);
    c.v_dim = need_dim("v", 4, "[B, T, H, V]").size(3);
  }
  for (const auto& [what, n] : {std::pair{"T", c.time}, {"H", c.heads}, {"K", c.k_dim}, {"V", c.v_dim}, {"B", c.batch},
                                {"G", c.groups}})
    if (n < 1) throw ContractViolation(fmt::format("{}: {}", where, what), "must be at least 1", std::to_string(n));
  if (c.heads % c.groups != 0)
    throw ContractViolation(fmt::format("{}: tensor 'B'", where),
                            fmt::format("its groups G must divide the heads / channels ({})", c.heads),
                            fmt::format("G = {}", c.groups));
  const DType dtype = c.inputs.at(std::string(spec.inputs.front().name)).dtype();
  if (!is_floating(dtype))
    throw ContractViolation(fmt::format("{}: tensor '{}'", where, spec.inputs.front().name), "must be floating",
                            dtype_name(dtype));
  for (const OpInputSpec& in : spec.inputs) {
    const auto found = c.inputs.find(std::string(in.name));
    if (found == c.inputs.end()) continue;  // an optional input left out
    const Tensor& t = found->second;
    if (t.dtype() != dtype && !(in.parameter && (t.dtype() == DType::f32 || t.dtype() == DType::f64)))
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, in.name),
                              fmt::format("must have the case's dtype {} (that of '{}'){}", dtype_name(dtype),
                                          spec.inputs.front().name, in.parameter ? ", f32 or f64" : ""),
                              dtype_name(t.dtype()));
    Shape want;
    switch (in.shape) {
      case OpInputShape::key: want = {c.batch, c.time, c.heads, c.k_dim}; break;
      case OpInputShape::value: want = {c.batch, c.time, c.heads, c.v_dim}; break;
      case OpInputShape::head_scalar: want = {c.batch, c.time, c.heads}; break;
      case OpInputShape::channel_time: want = {c.batch, c.heads, c.time}; break;
      case OpInputShape::channel_state: want = {c.heads, c.k_dim}; break;
      case OpInputShape::per_head: want = {c.heads}; break;
      case OpInputShape::group_state_time:
        want = t.dim() == 3 ? Shape{c.batch, c.k_dim, c.time} : Shape{c.batch, c.groups, c.k_dim, c.time};
        break;
      case OpInputShape::time_group_state: want = {c.batch, c.time, c.groups, c.k_dim}; break;
    }
    check_shape(path, std::string(in.name), t, want);
  }
  if (const auto it = file.tensors.find("cu_seqlens"); it != file.tensors.end()) {
    expected.insert("cu_seqlens");
    if (!spec.takes_cu_seqlens)
      throw ContractViolation(fmt::format("{}: tensor 'cu_seqlens'", where),
                              fmt::format("is not an input of op {} (mamba-ssm's selective_scan_fn takes none)", c.op),
                              shape_string(it->second.shape()));
    if (c.batch != 1)
      throw ContractViolation(fmt::format("{}: tensor 'cu_seqlens'", where), "needs batch B = 1 (packed input)",
                              fmt::format("B = {}", c.batch));
    read_cu_seqlens(path, it->second, c.time);
    c.cu_seqlens = it->second;
  }
  const std::string initial(spec.initial_name);
  if (const auto it = initial.empty() ? file.tensors.end() : file.tensors.find(initial); it != file.tensors.end()) {
    expected.insert(initial);
    if (spec.kind == OpKind::ssd && c.cu_seqlens)
      throw ContractViolation(fmt::format("{}: tensor 'initial_states'", where),
                              "is not taken with cu_seqlens by this judge of ssd (one state per sequence is not "
                              "mamba_chunk_scan_combined's varlen contract)",
                              shape_string(it->second.shape()));
    if (it->second.dtype() != dtype && it->second.dtype() != DType::f32 && it->second.dtype() != DType::f64)
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, initial),
                              fmt::format("must be {} (the case's dtype), f32 or f64", dtype_name(dtype)),
                              dtype_name(it->second.dtype()));
    check_shape(path, initial, it->second, c.final_state_shape());
    c.initial_state = it->second;
  }
  c.output_final_state = meta_bool(file, "output_final_state", true);
  // Cotangents "grad.<output>" (the cell case's "grad.H" convention): of an output the case asks for.
  for (const auto& [name, tensor] : file.tensors) {
    if (!name.starts_with("grad.")) continue;
    const std::string output = name.substr(5);
    const std::vector<std::string> outputs = op_output_names(c);
    if (std::find(outputs.begin(), outputs.end(), output) == outputs.end())
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, name),
                              fmt::format("is no cotangent of an output of op {} (grad.<output>, outputs: {})", c.op,
                                          fmt::join(outputs, ", ")),
                              shape_string(tensor.shape()));
    if (!is_floating(tensor.dtype()))
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, name), "must be floating", dtype_name(tensor.dtype()));
    check_shape(path, name, tensor, output == outputs.front() ? c.o_shape() : c.final_state_shape());
    c.cotangents.emplace(output, tensor);
    expected.insert(name);
  }
  std::vector<std::string> input_names;
  for (const OpInputSpec& in : spec.inputs) input_names.emplace_back(in.name);
  for (const auto& [name, tensor] : file.tensors)
    if (!expected.contains(name))
      throw ContractViolation(fmt::format("{}: tensor '{}'", where, name),
                              fmt::format("is not an input of op {} (inputs: {}{}{})", c.op, fmt::join(input_names, ", "),
                                          initial.empty() ? "" : ", " + initial, spec.takes_cu_seqlens ? ", cu_seqlens" : ""),
                              shape_string(tensor.shape()));
  c.scale = spec.unit_default_scale ? 1.0 : 1.0 / std::sqrt(static_cast<double>(c.k_dim));  // mamba: 1
  if (const auto s = meta(file, "scale")) {
    std::size_t used = 0;
    double value = 0.0;
    try {
      value = std::stod(*s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s->size() || !std::isfinite(value) || value <= 0.0)
      throw ContractViolation(fmt::format("{}: metadata 'scale'", where), "must be a finite positive number or None (K^-0.5)", *s);
    c.scale = value;
  }
  c.qk_l2norm = meta_bool(file, "use_qk_l2norm_in_kernel", false);
  if (c.qk_l2norm && !spec.takes_l2norm)
    throw ContractViolation(fmt::format("{}: metadata 'use_qk_l2norm_in_kernel'", where),
                            fmt::format("is not an argument of op {}", c.op), "True");
  if (spec.kind == OpKind::selective_scan) c.softplus = meta_bool(file, "delta_softplus", false);
  if (spec.kind == OpKind::ssd) {
    c.softplus = meta_bool(file, "dt_softplus", false);
    if (const auto limit = meta(file, "dt_limit"); limit && *limit != "(0.0, inf)")
      throw ContractViolation(fmt::format("{}: metadata 'dt_limit'", where),
                              "must be (0.0, inf), mamba's default (the judge does not clamp dt)", *limit);
  }
  if ((spec.kind == OpKind::selective_scan || spec.kind == OpKind::ssd) && meta(file, "scale"))
    throw ContractViolation(fmt::format("{}: metadata 'scale'", where), fmt::format("is not an argument of op {}", c.op),
                            *meta(file, "scale"));
  // The op's native mode by default: mamba-ssm's selective scan is one fused recurrent kernel.
  c.variant = meta(file, "variant").value_or(spec.kind == OpKind::selective_scan ? "fused_recurrent" : "chunk");
  if (c.variant != "chunk" && c.variant != "fused_recurrent")
    throw ContractViolation(fmt::format("{}: metadata 'variant'", where), "must be chunk or fused_recurrent", c.variant);
  return c;
}

OpCase read_op_case(const std::filesystem::path& path) { return op_case_from_file(read_safetensors(path), path); }

void write_op_case(const std::filesystem::path& path, const OpCase& problem) {
  std::map<std::string, Tensor> tensors = problem.inputs;
  if (problem.initial_state) tensors.emplace(std::string(op_spec(problem.op).initial_name), *problem.initial_state);
  if (problem.cu_seqlens) tensors.emplace("cu_seqlens", *problem.cu_seqlens);
  for (const auto& [output, tensor] : problem.cotangents) tensors.emplace("grad." + output, tensor);
  write_safetensors(path, tensors, problem.metadata);
}

OpCase generate_op_case(const OpGenerateOptions& o) {
  const OpSpec& spec = op_spec(o.op);
  if (!is_floating(o.dtype)) throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(o.dtype));
  if (o.decay != "normal" && o.decay != "hard" && o.decay != "none")
    throw ContractViolation("decay", "must be normal, hard or none", o.decay);
  if (o.qk_l2norm && !spec.takes_l2norm)
    throw ContractViolation("use_qk_l2norm_in_kernel", fmt::format("is not an argument of op {}", o.op), "True");
  if (!(o.key_scale > 0.0) || !std::isfinite(o.key_scale))
    throw ContractViolation("key_scale", "must be a finite positive number", fmt::format("{}", o.key_scale));
  const Shape key{o.batch, o.time, o.heads, o.k_dim}, val{o.batch, o.time, o.heads, o.v_dim},
      head{o.batch, o.time, o.heads};
  SplitMix64 rng(o.seed);
  const auto normals = [&](const Shape& shape) {
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& e : v) e = rng.normal(0.0, 1.0);
    return v;
  };
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const auto log_sigmoid = [](double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); };
  const auto normalise_rows = [&](std::vector<double>& v, std::int64_t n) {
    for (std::size_t r = 0; r < v.size(); r += static_cast<std::size_t>(n)) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < n; ++i) sum += v[r + i] * v[r + i];
      const double norm = std::sqrt(sum);
      for (std::int64_t i = 0; i < n; ++i) v[r + i] /= norm;
    }
  };
  const auto gates = [&](const Shape& shape) {
    std::vector<double> g = normals(shape);
    for (double& e : g) e = o.decay == "none" ? 0.0 : log_sigmoid(o.decay == "hard" ? e + 8.0 : e);
    return g;
  };
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, Shape> shapes;
  const bool mamba = spec.kind == OpKind::selective_scan || spec.kind == OpKind::ssd;
  if (mamba) {
    // Mamba's own initialisation: dt = softplus(raw + dt_bias) with dt_bias placing dt in
    // [1e-3, 1e-1] (hard: [1e-5, 1e-4], decays near 1); selective_scan A[d, n] = −(n + 1) (S4D
    // real), ssd A[h] in [−16, −1]; B, C, the input and z ~ N(0, 1), k times key_scale; D = 1.
    const bool ss = spec.kind == OpKind::selective_scan;
    const std::int64_t D = o.heads, N = o.k_dim, P = o.v_dim, G = 1;
    const Shape io = ss ? Shape{o.batch, D, o.time} : Shape{o.batch, o.time, D, P};
    const Shape dt = ss ? Shape{o.batch, D, o.time} : Shape{o.batch, o.time, D};
    const Shape bc = ss ? Shape{o.batch, G, N, o.time} : Shape{o.batch, o.time, G, N};
    shapes = {{ss ? "u" : "x", io}, {ss ? "delta" : "dt", dt}, {"z", io}, {"B", bc}, {"C", bc},
              {"A", ss ? Shape{D, N} : Shape{D}}, {"D", {D}}, {ss ? "delta_bias" : "dt_bias", {D}}};
    values[ss ? "u" : "x"] = normals(io);
    values[ss ? "delta" : "dt"] = normals(dt);
    for (double& e : values[ss ? "delta" : "dt"]) e *= 0.5;
    values["z"] = normals(io);
    values["B"] = normals(bc);
    for (double& e : values["B"]) e *= o.key_scale;
    values["C"] = normals(bc);
    std::vector<double> a(static_cast<std::size_t>(shape_numel(shapes.at("A")))), bias(static_cast<std::size_t>(D));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = ss ? -static_cast<double>(i % static_cast<std::size_t>(N) + 1) : -rng.uniform(1.0, 16.0);
    const double lo = o.decay == "hard" ? 1e-5 : 1e-3, hi = o.decay == "hard" ? 1e-4 : 1e-1;
    for (double& e : bias) {
      const double target = std::exp(rng.uniform(std::log(lo), std::log(hi)));
      e = std::log(std::expm1(target));  // softplus⁻¹
    }
    values["A"] = a;
    values[ss ? "delta_bias" : "dt_bias"] = bias;
    values["D"] = std::vector<double>(static_cast<std::size_t>(D), 1.0);
  } else {
    const bool delta = spec.kind == OpKind::delta_rule || spec.kind == OpKind::gated_delta_rule;
    values["q"] = normals(key);
    values["k"] = normals(key);
    values["v"] = normals(val);
    if (delta && !o.qk_l2norm) {
      normalise_rows(values["q"], o.k_dim);
      normalise_rows(values["k"], o.k_dim);
    }
    for (double& e : values["k"]) e *= o.key_scale;
    switch (spec.kind) {
      case OpKind::gla: values["g"] = gates(key); break;
      case OpKind::simple_gla: values["g"] = gates(head); break;
      case OpKind::gated_delta_rule: values["g"] = gates(head); [[fallthrough]];
      case OpKind::delta_rule: {
        values["beta"] = normals(head);
        for (double& e : values["beta"]) e = sigmoid(e);
        break;
      }
      case OpKind::dplr_delta_rule:
      case OpKind::rwkv7: {
        std::vector<double> kappa = normals(key), alpha = normals(key);
        normalise_rows(kappa, o.k_dim);
        std::vector<double> a(kappa.size()), b(kappa.size());
        for (std::size_t i = 0; i < kappa.size(); ++i) {
          a[i] = -kappa[i];
          b[i] = kappa[i] * sigmoid(alpha[i]);
        }
        values["a"] = a;
        values["b"] = b;
        values[spec.kind == OpKind::rwkv7 ? "w" : "gk"] = gates(key);
        if (spec.kind == OpKind::rwkv7) values["r"] = values.at("q");
        break;
      }
      default: break;
    }

  }
  SafetensorsFile file;
  for (const OpInputSpec& in : spec.inputs) {
    const std::string name(in.name);
    const Shape shape = mamba ? shapes.at(name)
                        : in.shape == OpInputShape::key ? key : in.shape == OpInputShape::value ? val : head;
    // mamba keeps A, D and the dt bias in f32 whatever the activations' dtype.
    const DType dtype = in.parameter && o.dtype != DType::f64 ? DType::f32 : o.dtype;
    file.tensors.emplace(name, Tensor::from_values(dtype, shape, values.at(name)));
  }
  std::int64_t sequences = o.batch;
  if (!o.cu_seqlens.empty()) {
    std::vector<double> cu(o.cu_seqlens.begin(), o.cu_seqlens.end());
    file.tensors.emplace("cu_seqlens", Tensor::from_values(DType::i64, {static_cast<std::int64_t>(cu.size())}, cu));
    sequences = static_cast<std::int64_t>(cu.size()) - 1;
  }
  if (o.h0_std) {
    if (spec.initial_name.empty())
      throw ContractViolation("h0_std", fmt::format("op {} takes no initial state", o.op), fmt::format("{}", *o.h0_std));
    const Shape shape = spec.kind == OpKind::ssd ? Shape{sequences, o.heads, o.v_dim, o.k_dim}
                                                 : Shape{sequences, o.heads, o.k_dim, o.v_dim};
    std::vector<double> h = normals(shape);
    for (double& e : h) e *= *o.h0_std;
    file.tensors.emplace(std::string(spec.initial_name), Tensor::from_values(o.dtype, shape, h));
  }
  const std::string variant =
      !o.variant.empty() ? o.variant : spec.kind == OpKind::selective_scan ? "fused_recurrent" : "chunk";
  file.metadata = {{"op", o.op},         {"library", std::string(spec.library)}, {"variant", variant},
                   {"seed", std::to_string(o.seed)}, {"decay", o.decay},        {"key_scale", fmt::format("{}", o.key_scale)},
                   {"scale", o.scale ? fmt::format("{}", *o.scale) : "None"},   {"head_first", "False"},
                   {"output_final_state", "True"}};
  if (spec.takes_l2norm) file.metadata["use_qk_l2norm_in_kernel"] = o.qk_l2norm ? "True" : "False";
  if (mamba) {
    if (o.scale) throw ContractViolation("scale", fmt::format("is not an argument of op {}", o.op), fmt::format("{}", *o.scale));
    file.metadata.erase("scale");
    file.metadata[spec.kind == OpKind::ssd ? "dt_softplus" : "delta_softplus"] = "True";
    if (spec.kind == OpKind::selective_scan && o.v_dim != 1)
      throw ContractViolation("v_dim", "must be 1 for selective_scan (the state of a channel is N values)",
                              std::to_string(o.v_dim));
  }
  return op_case_from_file(file, fmt::format("generated {} case", o.op));
}

std::vector<std::string> op_output_names(const OpCase& problem) {
  const OpSpec& spec = op_spec(problem.op);
  if (problem.output_final_state) return {std::string(spec.out_name), std::string(spec.state_name)};
  return {std::string(spec.out_name)};
}

}  // namespace pararnn

namespace pararnn {

std::vector<std::string> op_gradient_inputs(const OpCase& problem) {
  const OpSpec& spec = op_spec(problem.op);
  std::vector<std::string> names;
  for (const OpInputSpec& in : spec.inputs)
    if (problem.inputs.contains(std::string(in.name))) names.emplace_back(in.name);
  if (problem.initial_state) names.emplace_back(spec.initial_name);
  return names;
}

std::vector<std::string> op_default_loss_outputs(const OpCase& problem) {
  const OpSpec& spec = op_spec(problem.op);
  if (spec.library == "mamba_ssm") return {std::string(spec.out_name)};
  return op_output_names(problem);
}

}  // namespace pararnn
