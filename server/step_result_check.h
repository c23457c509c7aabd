// CheckStepResult: rank 0's answer to a scheduled step, checked whole against what was
// scheduled before any of it reaches a request (the engine thread calls it; pure).
//
// UNAVAILABLE naming the step and the sequence when the answer breaks worker.proto: an
// output for a sequence not in the step or answered twice, a token where none was due
// or none where one was, a token outside [0, vocab_size) (vocab_size 0: unchecked),
// logprobs missing, mismatched, not finite, above 0 or more than asked for, prompt
// logprobs not exactly one per computed position whose successor is a prompt token.
// The engine fails the step (and the pool) on it: a broken rank never corrupts a request.
// An output with `error` (one sequence's own failure) carries a real status code and
// nothing else; it stands for that sequence's token.
#ifndef TPSERVE_SERVER_STEP_RESULT_CHECK_H_
#define TPSERVE_SERVER_STEP_RESULT_CHECK_H_

#include "absl/status/status.h"
#include "server/scheduler.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

absl::Status CheckStepResult(const ScheduledStep& step, const worker::v1::StepResult& result,
                             int vocab_size);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_STEP_RESULT_CHECK_H_
