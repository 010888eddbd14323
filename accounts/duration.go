package accounts

import (
	"fmt"
	"time"
)

// HumanDuration is a duration as a person reads it, in its two largest units:
// 45s, 3m20s, 5h, 5h10m, 9d.
func HumanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	two := func(big, small time.Duration, bigUnit, smallUnit string) string {
		b, s := d/big, d%big/small
		if s == 0 {
			return fmt.Sprintf("%d%s", b, bigUnit)
		}
		return fmt.Sprintf("%d%s%d%s", b, bigUnit, s, smallUnit)
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", d.Round(time.Second)/time.Second)
	case d < time.Hour:
		d = d.Round(time.Second)
		return two(time.Minute, time.Second, "m", "s")
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return two(time.Hour, time.Minute, "h", "m")
	}
	return fmt.Sprintf("%dd", (d+12*time.Hour)/(24*time.Hour))
}
