// PostProcessor: adds the special tokens around an encoded single sequence when
// encode() is asked to (TemplateProcessing's "single" template, Bert and Roberta
// processing; ByteLevel only adjusts offsets, so it adds nothing). Immutable,
// safe from many threads.
#ifndef TPSERVE_SERVER_TOKENIZER_POST_PROCESSOR_H_
#define TPSERVE_SERVER_TOKENIZER_POST_PROCESSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace tpserve {

class PostProcessor {
 public:
  // One item of a template: fixed ids, or the sequence itself.
  struct Piece {
    bool is_sequence;
    std::vector<int32_t> ids;
  };

  // The ids around `sequence`: template pieces in order (empty = no change).
  explicit PostProcessor(std::vector<Piece> single) : single_(std::move(single)) {}

  std::vector<int32_t> Process(std::vector<int32_t> sequence) const;
  // The largest id the template adds; -1 when it adds none.
  int32_t MaxId() const;

 private:
  std::vector<Piece> single_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_POST_PROCESSOR_H_
