package request

import (
	"errors"
	"strconv"
)

// Class is a request's priority class, as its tenant policy decides it
// (dispatch.Tenants) from the x-sluice-priority header or its inbound key.
// The gate orders tickets by a gate.Class of the same value, which the
// scheduler fills from this one, so that request imports nothing of the
// gate and the gate nothing of the project. The zero value is
// ClassInteractive.
type Class uint8

// The classes, highest first, in gate.Class's order.
const (
	ClassInteractive Class = iota // a person waits on the answer
	ClassBatch                    // work that can wait
	numClasses
)

// classNames are the classes' names, as the x-sluice-priority header and
// the inbound keys file spell them.
var classNames = [numClasses]string{ClassInteractive: "interactive", ClassBatch: "batch"}

// String is the class's name: interactive or batch.
func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// ErrClass is ParseClass's answer to a name that is no class.
var ErrClass = errors.New("must be interactive or batch")

// ParseClass reads a class by its name, exactly as String spells it; ""
// is interactive, the default.
func ParseClass(name string) (Class, error) {
	for c, n := range classNames {
		if name == n {
			return Class(c), nil
		}
	}
	if name == "" {
		return ClassInteractive, nil
	}
	return ClassInteractive, ErrClass
}
