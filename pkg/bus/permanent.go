package bus

import (
	"errors"
	"fmt"
)

// permanentError marks input that can never succeed.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Permanentf is Permanent(fmt.Errorf(…)).
func Permanentf(format string, args ...any) error { return Permanent(fmt.Errorf(format, args...)) }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
