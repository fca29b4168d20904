// SPDX-License-Identifier: MIT

// A Go program with a known call chain, for the .gopclntab symbolizer tests
// (tests/unit/test-symbolizer-gopclntab.c, tests/integration/test_symbolize_go.py).
//
//	gospin SECONDS   spins for SECONDS in main.main → main.spin → main.work (→ main.mix,
//	                 inlined; → main.fib), then exits
//	gospin -frames   prints what the Go runtime itself says about its code: one "S" line per
//	                 frame of a stack captured under two inlined calls, and one "P" line per
//	                 instruction byte of the main.* functions; the unit test compares its
//	                 own answers for the same addresses with these
//
// Lines the tests look for carry a "MARK:" comment; the tests find their numbers by reading
// this file, so editing it does not break them.
package main

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"time"
)

var sink uint64

// Small and leaf: the compiler inlines it into work.
func mix(x uint64) uint64 {
	return x*6364136223846793005 + 1442695040888963407 // MARK:mix-body
}

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2) // MARK:fib-recurse
}

//go:noinline
func work(x uint64) uint64 {
	for i := 0; i < 200000; i++ {
		x = mix(x) // MARK:work-calls-mix
	}
	return x + uint64(fib(18)) // MARK:work-calls-fib
}

//go:noinline
func spin(deadline time.Time) {
	x := uint64(1)
	for time.Now().Before(deadline) { // MARK:spin-calls-now
		x = work(x) // MARK:spin-calls-work
	}
	sink = x
}

//go:noinline
func capture() []uintptr {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(0, pcs)
	return pcs[:n]
}

// inner and middle are inlined into outer: the call of capture sits under two inlined calls.
func inner() []uintptr {
	return capture() // MARK:inner-calls-capture
}

func middle() []uintptr {
	return inner() // MARK:middle-calls-inner
}

//go:noinline
func outer() []uintptr {
	return middle() // MARK:outer-calls-middle
}

// The entry address of a function value (its code pointer).
func funcEntry(fn interface{}) uintptr {
	return reflect.ValueOf(fn).Pointer()
}

func printFrames() {
	frames := runtime.CallersFrames(outer())
	for {
		f, more := frames.Next()
		fmt.Printf("S %#x %s %s %d\n", f.PC, f.Function, f.File, f.Line)
		if !more {
			break
		}
	}

	// Every byte of the main.* functions: FuncForPC names the innermost inlined function
	// there, FileLine its position.
	for _, fn := range []interface{}{mix, fib, work, spin, capture, outer, printFrames, main} {
		entry := funcEntry(fn)
		for pc := entry; ; pc++ {
			f := runtime.FuncForPC(pc)
			if f == nil || f.Entry() != entry {
				break
			}
			file, line := f.FileLine(pc)
			fmt.Printf("P %#x %s %s %d\n", pc, f.Name(), file, line)
		}
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-frames" {
		printFrames()
		return
	}
	seconds := 5.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = s
		}
	}
	spin(time.Now().Add(time.Duration(seconds * float64(time.Second)))) // MARK:main-calls-spin
}
