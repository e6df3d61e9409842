// Streams between ranks of an emulated cluster (tests/cluster): every SRC:DST pair sends BYTES at
// once, one message each (Open MPI cuts it into TCP segments), and rank 0 prints one JSON line:
// the pairs, the seconds each receiver took from the common start, and MB/s per pair and in total.
// Usage: cluster_stream BYTES SRC:DST [SRC:DST]...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/timer.h"

using namespace wallfacer;

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  comm::Communicator world = comm::Communicator::world();
  const int rank = world.rank(), P = world.size();
  if (argc < 3) {
    if (rank == 0) std::fprintf(stderr, "usage: cluster_stream BYTES SRC:DST [SRC:DST]...\n");
    return 2;
  }
  const int64_t count = std::atoll(argv[1]) / int64_t(sizeof(float));
  std::vector<std::pair<int, int>> pairs;
  for (int i = 2; i < argc; ++i) {
    int s = -1, d = -1;
    if (std::sscanf(argv[i], "%d:%d", &s, &d) != 2 || s < 0 || d < 0 || s >= P || d >= P ||
        s == d || count <= 0) {
      if (rank == 0)
        std::fprintf(stderr, "cluster_stream: '%s' is not SRC:DST of two ranks below %d\n", argv[i],
                     P);
      return 2;
    }
    pairs.emplace_back(s, d);
  }
  std::vector<std::vector<float>> bufs(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i)
    if (pairs[i].first == rank || pairs[i].second == rank)
      bufs[i].assign(static_cast<size_t>(count), 1.f);
  world.barrier();
  Timer t;
  std::vector<comm::Request> reqs;
  std::vector<size_t> received;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (pairs[i].first == rank)
      reqs.push_back(world.isend(bufs[i].data(), count, pairs[i].second, 1));
    if (pairs[i].second == rank) {
      reqs.push_back(world.irecv(bufs[i].data(), count, pairs[i].first, 1));
      received.push_back(i);
    }
  }
  // A receiver's time: when its last message is in (each rank receives at most one here).
  for (auto& r : reqs) r.wait();
  std::vector<double> took(pairs.size(), 0.0);
  for (size_t i : received) took[i] = t.seconds();
  world.all_reduce_sum(took.data(), int64_t(took.size()));
  if (rank == 0) {
    const double mb = double(count) * sizeof(float) / 1e6;
    std::string s =
        "{\"bytes\": " + std::to_string(count * int64_t(sizeof(float))) + ", \"pairs\": [";
    for (size_t i = 0; i < pairs.size(); ++i)
      s += (i ? ", [" : "[") + std::to_string(pairs[i].first) + ", " +
           std::to_string(pairs[i].second) + "]";
    s += "], \"mb_per_s\": [";
    double last = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
      char b[64];
      std::snprintf(b, sizeof b, "%s%.4f", i ? ", " : "", mb / took[i]);
      s += b;
      last = std::max(last, took[i]);
    }
    char b[96];
    std::snprintf(b, sizeof b, "], \"total_mb_per_s\": %.4f}", double(pairs.size()) * mb / last);
    std::printf("%s%s\n", s.c_str(), b);
  }
  return 0;
}
