#pragma once
// Tracing spans: a per-process recorder of timed spans (kernel calls, transfers, waits,
// collectives, training phases) and the Chrome trace event format they are written in
// (docs/trace.md; Perfetto and chrome://tracing open it).
//
// Recording is off unless start() was called: then every hook costs one load of a flag. When on,
// record() copies a fixed-size Event into a buffer allocated by start(): no allocation, no I/O.
// Names, argument keys and string values are pointers to static strings. When the buffer is full,
// further events are counted as dropped (the file's metadata says how many).
//
// No MPI here: comm/trace_merge.h aligns the clocks of the ranks and merges their events.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace wallfacer::trace {

// What a span is, for colouring: compute (kernels, local data movement), communication (transfers
// from post to completion, collectives), waits (blocked on transfers), phases (training step
// parts and layers, which contain the others).
enum class Cat : uint8_t { Compute, Comm, Wait, Phase };
const char* cat_name(Cat c);

// An argument: an integer, or a static string when `str` is set.
struct Arg {
  const char* key = nullptr;
  int64_t num = 0;
  const char* str = nullptr;
};

constexpr int kMaxArgs = 7;

struct Event {
  const char* name = nullptr;
  Cat cat = Cat::Compute;
  uint8_t lane = 0;  // 0: the rank's sequential ops; 1: transfers (which overlap them)
  int64_t t0 = 0;    // ns on this process's steady clock
  int64_t t1 = 0;    // ns, >= t0
  int nargs = 0;
  std::array<Arg, kMaxArgs> args{};
};

namespace detail {
extern bool active;
}

// True while recording (one load: the hooks test it before anything else).
inline bool on() { return detail::active; }

// ns on the steady clock (the clock of Event::t0, t1).
int64_t now_ns();

// Allocates room for `capacity` events, clears earlier ones and starts recording.
void start(size_t capacity);
// Pauses (false) or resumes (true) recording after start(); a no-op before it.
void set_active(bool active);
// Stops recording; the events stay until the next start().
void stop();

// Appends one span while recording (dropped and counted when the buffer is full).
void record(const Event& e);
void record(const char* name, Cat cat, int64_t t0, int64_t t1, std::initializer_list<Arg> args,
            uint8_t lane = 0);
// An event of that name, category and arguments (at most kMaxArgs), times unset.
Event make_event(const char* name, Cat cat, std::initializer_list<Arg> args);

const std::vector<Event>& events();  // recorded so far, in recording order
size_t dropped();                    // events that did not fit

// A span from construction to destruction, recorded when tracing was on at construction.
class Span {
 public:
  Span(const char* name, Cat cat, std::initializer_list<Arg> args = {});
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Event e_;
  bool on_ = false;
};

// ---------------------------------------------------------------------------------------------
// The file format.

// One rank's events for the merged file: an array of Chrome "X" events without pid and tid, times
// in microseconds on rank 0's clock (t + offset_ns).
nlohmann::json rank_events_json(const std::vector<Event>& events, int64_t offset_ns);

struct RankTrace {
  int rank = 0;
  std::string host;       // the node: one process (pid) per distinct host
  nlohmann::json events;  // from rank_events_json
};

// The whole file: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": metadata}. Ranks
// become threads (tid = 100 * rank) of their host's process; a rank's transfers are placed on
// extra threads (tid = 100 * rank + k, named "rank R transfers k") so that spans on one thread
// never overlap without nesting. Times are shifted so that the first span starts at 0.
nlohmann::json chrome_trace(const std::vector<RankTrace>& ranks, nlohmann::json metadata);

// The events of a Chrome trace file, as trace-plot and the tests read them.
struct ParsedSpan {
  std::string name, cat;
  int rank = 0;
  int lane = 0;            // 0: the rank's sequential ops; k >= 1: its transfer thread k
  double ts = 0, dur = 0;  // us
  nlohmann::json args;
};
// The largest rank a trace may hold (a span's args.rank or tid / 100).
constexpr int kMaxTraceRank = (1 << 20) - 1;
// Throws UsageError when `text` is not a trace in this format: not JSON or nested deeper than 64
// levels, no "traceEvents" array, an "X" event without a name, finite ts and dur >= 0, or with a
// rank outside 0..kMaxTraceRank.
std::vector<ParsedSpan> parse_chrome_trace(const std::string& text,
                                           nlohmann::json* metadata = nullptr);

// A trace file as trace-plot draws it: the spans, one row per rank, and labels from the
// metadata (printable text: control characters dropped).
struct Timeline {
  std::vector<ParsedSpan> spans;
  int ranks = 0;                   // 1 + the highest rank of a span
  std::vector<std::string> hosts;  // per rank when "hosts" names each rank's node, else empty
  std::string command;             // "command" of the metadata (attn, train, plan), or ""
  std::string title;               // "ring P=4 seq=4096 causal (measured)", from "config"
  double backward_start_us = -1;   // the first span of rank 0 in the backward phase, or -1
};
// Throws UsageError as parse_chrome_trace; metadata keys of other types than written are ignored.
Timeline read_timeline(const std::string& text);

}  // namespace wallfacer::trace
