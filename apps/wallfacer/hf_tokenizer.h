#pragma once
// Text <-> token ids with a Hugging Face tokenizer.json, for the --tokenizer option of sample and
// generate. wallfacer has no tokenizer of its own: both directions run scripts/tokenize (Python,
// with the optional `tokenizers` package from PyPI) as a child process of $WALLFACER_PYTHON, else
// the python3 on PATH (mpirun may put its own folder first on the ranks' PATH), the only Python
// wallfacer ever runs. The script is looked up beside the binary: ../scripts/ (a build folder of
// the source tree) or ../share/wallfacer/ (cmake --install).
//
// Errors are UsageErrors of one line: the tokenizer file missing, no python3, the package not
// installed (what to install), or the script's own message (a bad tokenizer.json, an id outside
// its vocabulary).

#include <cstdint>
#include <string>
#include <vector>

namespace wallfacer::cli {

// The ids of `text` (no special tokens added), as the --prompt of a model of `vocab` ids:
// UsageError when it has none, or one outside the vocabulary (another model's tokenizer).
std::vector<int32_t> tokenizer_encode(const std::string& tokenizer, const std::string& text,
                                      int vocab);

// The text of `ids` (special tokens kept), without a trailing newline.
std::string tokenizer_decode(const std::string& tokenizer, const std::vector<int32_t>& ids);

}  // namespace wallfacer::cli
