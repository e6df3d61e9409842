// wallfacer._wallfacer: the C++ side of the Python module (docs/python.md). Thin bindings of the
// library: the planner (plan::plan_all and its JSON, as `plan --json` prints it), the layouts
// (seqpar::local_positions) and seqpar::DistAttention on NumPy buffers, over a communicator the
// host's mpi4py hands over (comm::from_mpi_comm). The Python package (wallfacer/__init__.py)
// checks the Python types and shapes; everything else is checked here by the library itself, so
// the messages are the CLI's. UsageError becomes ValueError, every other wallfacer::Error
// RuntimeError.

#include <mpi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/mpi_comm.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/config.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/train/data.h"

namespace py = pybind11;

namespace wallfacer::python {
namespace {

// A cluster or model: TOML text (a dict converted by the package) or a file path.
struct Source {
  std::string text;  // the path when is_path
  bool is_path = false;
  std::string name;  // names it in messages when it is text
};

// plan --json's object ({"cluster", "model", "seq", "gpus", "configs", "best"}) as JSON text.
std::string plan_json(const Source& cluster, const Source& model, const std::string& seq,
                      int gpus) {
  WF_USAGE_CHECK(gpus >= 0, "--gpus is {}; give a positive number of devices (default: all)", gpus);
  plan::PlanInput in;
  in.cluster = cluster.is_path ? plan::load_cluster(cluster.text)
                               : plan::parse_cluster(cluster.text, cluster.name);
  in.model =
      model.is_path ? plan::load_model(model.text) : plan::parse_model(model.text, model.name);
  in.seq = plan::parse_tokens(seq);
  in.gpus = gpus > 0 ? gpus : in.cluster.devices();
  std::vector<plan::Prediction> preds;
  {
    py::gil_scoped_release release;
    preds = plan::plan_all(in);
  }
  return plan::plan_json(in, preds).dump(2);
}

// The parts of an AttnConfig that do not depend on the tensors' shapes.
// inner: the double ring's W, given (0 for the other strategies).
seqpar::AttnConfig base_config(const std::string& strategy, int teams, int ulysses, bool causal,
                               const std::optional<std::vector<int64_t>>& docs,
                               const std::string& dtype, const std::string& layout, int inner) {
  seqpar::AttnConfig cfg;
  const seqpar::ParallelSpec spec{seqpar::parse_strategy(strategy), teams, inner, ulysses, false};
  seqpar::validate_parallel(spec);
  seqpar::set_parallel(cfg, spec);
  cfg.causal = causal;
  cfg.dtype = seqpar::parse_dtype(dtype);
  cfg.layout = seqpar::parse_layout(layout);
  if (docs) cfg.doc_lengths = *docs;
  WF_USAGE_CHECK(cfg.layout == seqpar::Layout::Strategy || !cfg.doc_lengths.empty(),
                 "--layout balanced balances documents; give their lengths (docs)");
  return cfg;
}

py::array_t<int64_t> local_positions(int64_t seq, int world, int rank, const std::string& strategy,
                                     int teams, int ulysses,
                                     const std::optional<std::vector<int64_t>>& docs, bool causal,
                                     const std::string& layout, int inner) {
  seqpar::AttnConfig cfg =
      base_config(strategy, teams, ulysses, causal, docs, "fp32", layout, inner);
  WF_USAGE_CHECK(world >= 1, "world is {}; the group needs at least 1 rank", world);
  WF_USAGE_CHECK(rank >= 0 && rank < world, "rank {} is outside a group of {} ranks (0..{})", rank,
                 world, world - 1);
  // The layout does not depend on heads or the head dim: any the strategy accepts.
  cfg.seq = seq;
  cfg.doc_lengths = seqpar::doc_lengths_from_options(cfg.doc_lengths, 0, seq, 0);
  cfg.heads = cfg.kv_heads = world * cfg.ulysses;
  cfg.head_dim = 1;
  seqpar::validate(cfg, world);
  const std::vector<int64_t> pos = seqpar::local_positions(cfg, world, rank);
  py::array_t<int64_t> out(py::ssize_t(pos.size()));
  std::copy(pos.begin(), pos.end(), out.mutable_data());
  return out;
}

// The tokens of a shard file (`wallfacer prepare`), verified, as a NumPy int32 array (a copy),
// and its vocabulary size.
py::tuple load_tokens(const std::string& path) {
  const train::TokenShard shard(path);
  py::array_t<int32_t> tokens(py::ssize_t(shard.size()));
  int32_t* out = tokens.mutable_data();
  for (int64_t i = 0; i < shard.size(); ++i) out[i] = shard[i];
  return py::make_tuple(tokens, shard.vocab());
}

// DistAttention on NumPy arrays. Built in two steps, so that bad arguments are refused before any
// communication: the constructor parses the arguments (no MPI), connect() duplicates the host's
// communicator (collective), and the DistAttention itself is built at the first forward, when the
// shapes are known (validated first, then collective), and again when they change.
class Attention {
 public:
  Attention(const std::string& strategy, int teams, int ulysses, bool causal,
            const std::optional<std::vector<int64_t>>& docs, const std::string& dtype,
            const std::string& layout, int inner)
      : base_(base_config(strategy, teams, ulysses, causal, docs, dtype, layout, inner)) {}

  void connect(int64_t fortran_handle) {
    WF_USAGE_CHECK(!group_, "this Attention is connected already");
    int alive = 0, done = 0;
    MPI_Initialized(&alive);
    MPI_Finalized(&done);
    WF_USAGE_CHECK(alive && !done,
                   "MPI is not running: import mpi4py's MPI (from mpi4py import MPI) before "
                   "building a wallfacer.Attention, and keep it until the Attention is closed");
    group_ = comm::from_mpi_comm(MPI_Comm_f2c(MPI_Fint(fortran_handle)));
  }

  int rank() const { return connected().rank(); }
  int size() const { return connected().size(); }
  std::string dtype() const { return std::string(seqpar::dtype_name(base_.dtype)); }

  // The documents of the following calls (collective when the attention is built).
  void set_documents(const std::optional<std::vector<int64_t>>& docs) {
    std::vector<int64_t> lengths = docs ? *docs : std::vector<int64_t>{};
    if (lengths == base_.doc_lengths) return;
    if (attn_) {
      WF_USAGE_CHECK(base_.layout == seqpar::Layout::Strategy,
                     "the documents of the balanced layout decide where the rows go: build a new "
                     "Attention for new documents");
      seqpar::AttnConfig next = cfg_;
      next.doc_lengths = seqpar::doc_lengths_from_options(lengths, 0, cfg_.seq, 0);
      seqpar::validate(next, size());
      py::gil_scoped_release release;
      attn_->set_documents(lengths.data(), int(lengths.size()));
    }
    base_.doc_lengths = lengths;
    cfg_.doc_lengths = lengths;
  }

  // (o, lse) of q (B, n, H, D), k, v (B, n, Hkv, D); float32 or, for bf16, uint16 arrays,
  // C-contiguous (the package checks).
  py::tuple forward(const py::array& q, const py::array& k, const py::array& v) {
    prepare(q, k);
    const auto& c = cfg_;
    const py::ssize_t B = c.batch, n = rows(), H = c.heads, D = c.head_dim;
    py::array_t<float> lse({B, H, n});
    if (c.dtype == seqpar::Dtype::bf16) {
      py::array_t<uint16_t> o({B, n, H, D});
      {
        py::gil_scoped_release release;
        attn_->forward(as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(o), lse.mutable_data());
      }
      return py::make_tuple(o, lse);
    }
    py::array_t<float> o({B, n, H, D});
    {
      py::gil_scoped_release release;
      attn_->forward(as_f32(q), as_f32(k), as_f32(v), o.mutable_data(), lse.mutable_data());
    }
    return py::make_tuple(o, lse);
  }

  // (dq, dk, dv) given the matching forward's q, k, v, o, lse and dout.
  py::tuple backward(const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                     const py::array_t<float>& lse, const py::array& dout) {
    prepare(q, k);
    const auto& c = cfg_;
    const py::ssize_t B = c.batch, n = rows(), H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
    if (c.dtype == seqpar::Dtype::bf16) {
      py::array_t<uint16_t> dq({B, n, H, D}), dk({B, n, Hkv, D}), dv({B, n, Hkv, D});
      {
        py::gil_scoped_release release;
        attn_->backward(as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(o), lse.data(), as_bf16(dout),
                        as_bf16(dq), as_bf16(dk), as_bf16(dv));
      }
      return py::make_tuple(dq, dk, dv);
    }
    py::array_t<float> dq({B, n, H, D}), dk({B, n, Hkv, D}), dv({B, n, Hkv, D});
    {
      py::gil_scoped_release release;
      attn_->backward(as_f32(q), as_f32(k), as_f32(v), as_f32(o), lse.data(), as_f32(dout),
                      dq.mutable_data(), dk.mutable_data(), dv.mutable_data());
    }
    return py::make_tuple(dq, dk, dv);
  }

  py::dict stats() const {
    py::dict d;
    if (!attn_) return d;
    const seqpar::AttnStats& s = attn_->stats();
    d["p2p_bytes_fwd"] = s.p2p_bytes_fwd, d["p2p_bytes_bwd"] = s.p2p_bytes_bwd;
    d["coll_bytes_fwd"] = s.coll_bytes_fwd, d["coll_bytes_bwd"] = s.coll_bytes_bwd;
    d["p2p_steps_fwd"] = s.p2p_steps_fwd, d["p2p_steps_bwd"] = s.p2p_steps_bwd;
    d["fwd_ms"] = s.fwd_ms, d["bwd_ms"] = s.bwd_ms;
    d["exposed_comm_fwd_ms"] = s.exposed_comm_fwd_ms;
    d["exposed_comm_bwd_ms"] = s.exposed_comm_bwd_ms;
    return d;
  }

  // Collective: frees the DistAttention and the duplicated communicator.
  void close() {
    attn_.reset();
    group_.reset();
  }

 private:
  const comm::Communicator& connected() const {
    WF_USAGE_CHECK(group_.has_value(), "this Attention is closed");
    return *group_;
  }
  int64_t rows() const { return cfg_.seq / group_->size(); }

  // The config of these shapes; the DistAttention (re)built when it differs from the current one.
  void prepare(const py::array& q, const py::array& k) {
    const int P = connected().size();
    seqpar::AttnConfig c = base_;
    c.batch = int(q.shape(0));
    c.seq = int64_t(q.shape(1)) * P;
    c.heads = int(q.shape(2));
    c.kv_heads = int(k.shape(2));
    c.head_dim = int(q.shape(3));
    c.doc_lengths = seqpar::doc_lengths_from_options(c.doc_lengths, 0, c.seq, 0);
    if (attn_ && c.batch == cfg_.batch && c.seq == cfg_.seq && c.heads == cfg_.heads &&
        c.kv_heads == cfg_.kv_heads && c.head_dim == cfg_.head_dim)
      return;
    seqpar::validate(c, P);  // before any communication: the same message on every rank
    attn_.reset();
    py::gil_scoped_release release;
    // Every rank must pass the same shapes: agreed before the constructor's collectives.
    std::vector<double> key{double(c.batch), double(c.seq), double(c.heads), double(c.kv_heads),
                            double(c.head_dim)};
    std::vector<double> both(key);
    for (double x : key) both.push_back(-x);
    group_->all_reduce_max(both.data(), int64_t(both.size()));
    group_->agree([&] {
      for (size_t i = 0; i < key.size(); ++i)
        WF_USAGE_CHECK(both[i] == key[i] && -both[i + key.size()] == key[i],
                       "the ranks pass different shapes (here q is ({}, {}, {}, {}) and k has {} "
                       "heads); every rank passes its own rows of the same batch, heads and head "
                       "dim, the same number of rows",
                       c.batch, c.seq / P, c.heads, c.head_dim, c.kv_heads);
    });
    attn_ = std::make_unique<seqpar::DistAttention>(c, *group_);
    cfg_ = c;
  }

  static const float* as_f32(const py::array& a) { return static_cast<const float*>(a.data()); }
  static float* as_f32(py::array& a) { return static_cast<float*>(a.mutable_data()); }
  static const bf16* as_bf16(const py::array& a) { return static_cast<const bf16*>(a.data()); }
  static bf16* as_bf16(py::array& a) { return static_cast<bf16*>(a.mutable_data()); }

  seqpar::AttnConfig base_, cfg_;
  std::optional<comm::Communicator> group_;
  std::unique_ptr<seqpar::DistAttention> attn_;
};

}  // namespace
}  // namespace wallfacer::python

PYBIND11_MODULE(_wallfacer, m) {
  namespace wp = wallfacer::python;
  m.doc() = "wallfacer's C++ library (use the package `wallfacer`, docs/python.md)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const wallfacer::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const wallfacer::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.def(
      "plan_json",
      [](const std::string& cluster, bool cluster_is_path, const std::string& model,
         bool model_is_path, const std::string& seq, int gpus) {
        return wp::plan_json({cluster, cluster_is_path, "cluster (dict)"},
                             {model, model_is_path, "model (dict)"}, seq, gpus);
      },
      py::arg("cluster"), py::arg("cluster_is_path"), py::arg("model"), py::arg("model_is_path"),
      py::arg("seq"), py::arg("gpus"));
  m.def("local_positions", &wp::local_positions, py::arg("seq"), py::arg("world"), py::arg("rank"),
        py::arg("strategy"), py::arg("teams"), py::arg("ulysses"), py::arg("docs"),
        py::arg("causal"), py::arg("layout"), py::arg("inner"));
  m.def(
      "uses_zigzag_layout",
      [](const std::string& strategy, bool causal) {
        wallfacer::seqpar::AttnConfig cfg;
        cfg.strategy = wallfacer::seqpar::parse_strategy(strategy);
        cfg.causal = causal;
        return wallfacer::seqpar::uses_zigzag_layout(cfg);
      },
      py::arg("strategy"), py::arg("causal"));
  m.def("load_tokens", &wp::load_tokens, py::arg("path"));
  m.def("set_timeout", &wallfacer::comm::set_timeout, py::arg("seconds"));
  m.def("timeout", &wallfacer::comm::timeout);
  m.def("mark_launched", &wallfacer::comm::mark_launched);
  py::class_<wp::Attention>(m, "Attention")
      .def(py::init<const std::string&, int, int, bool, const std::optional<std::vector<int64_t>>&,
                    const std::string&, const std::string&, int>(),
           py::arg("strategy"), py::arg("teams"), py::arg("ulysses"), py::arg("causal"),
           py::arg("docs"), py::arg("dtype"), py::arg("layout"), py::arg("inner"))
      .def("connect", &wp::Attention::connect, py::arg("fortran_handle"))
      .def_property_readonly("rank", &wp::Attention::rank)
      .def_property_readonly("size", &wp::Attention::size)
      .def_property_readonly("dtype", &wp::Attention::dtype)
      .def("set_documents", &wp::Attention::set_documents, py::arg("docs"))
      .def("forward", &wp::Attention::forward, py::arg("q"), py::arg("k"), py::arg("v"))
      .def("backward", &wp::Attention::backward, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("o"), py::arg("lse"), py::arg("dout"))
      .def("stats", &wp::Attention::stats)
      .def("close", &wp::Attention::close);
}
