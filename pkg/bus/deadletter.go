package bus

// DeadLetterSubject is troy.dlq.<stage>.<run>; a run token that is not
// valid becomes "invalid".
func DeadLetterSubject(stage, run string) string {
	if !ValidRun(run) {
		run = "invalid"
	}
	return Subject(StageDLQ, stage) + "." + run
}

// unfinished is the dead-letter reason of a message delivered once more
// than its handlers get: every earlier delivery ended without an answer.
func unfinished(maxDeliver int) error {
	return Permanentf("no handler finished it in %d deliveries (each crashed, hung past the ack wait or was killed): it may be too large or too costly to process", maxDeliver)
}
