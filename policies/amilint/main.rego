# METADATA
# title: amilint entry point
# description: |
#   data.amilint.findings is the one query amilint evaluates. It gathers the
#   findings set of every package under data.amilint.rules, the shipped rule
#   families and any user policy that declares a package there.
# scope: package
package amilint

# METADATA
# title: All findings
# description: Every finding object of every rule family.
findings contains f if {
	some family
	some f in data.amilint.rules[family].findings
}
