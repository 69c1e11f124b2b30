package gate

import (
	"errors"
	"strconv"
)

// Class is a request's priority class: a fair order grants a lower class
// only when no higher one waits, or once it has waited its starvation
// bound. It is the one form of the class in sluice: the request's
// descriptor carries it, the tenant policy sets it, a ticket orders by it.
// The zero value is ClassInteractive.
type Class uint8

// The classes, highest first.
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
	switch name {
	case "", classNames[ClassInteractive]:
		return ClassInteractive, nil
	case classNames[ClassBatch]:
		return ClassBatch, nil
	}
	return ClassInteractive, ErrClass
}
