// Command rubick-srun is part of rubick; see the README.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "rubick-srun: not built yet")
	os.Exit(2)
}
