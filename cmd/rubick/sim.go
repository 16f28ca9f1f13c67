package main

import (
	"context"
	"fmt"
	"io"
)

// runSim implements `rubick sim`.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("sim: not built yet")
}
