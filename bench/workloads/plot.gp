# Plots acqfs's ratios per workload (bench/workloads/run.sh writes the data).
# Run as: gnuplot -e "datafile='ratios.dat'; outfile='ratios.svg'; subtitle='...'" plot.gp
# (who='acqfs-uring' names the column plotted, for the io_uring transport's plot).
# The data file has a comment line (#), then one line per workload: a label (no
# spaces) and acqfs's slowdown against native disk, the kernel overlayfs and
# fuse-overlayfs ("?" where there is no value). Slowdown is acqfs's time over
# the peer's time, or for throughput the peer's speed over acqfs's, so above
# 1 means acqfs is slower for every workload alike.
if (!exists("datafile")) datafile = 'ratios.dat'
if (!exists("outfile")) outfile = 'ratios.svg'
if (!exists("subtitle")) subtitle = ''
if (!exists("who")) who = 'acqfs'

set terminal svg size 1000,520 dynamic font 'sans,12' background '#ffffff'
set output outfile
set datafile missing '?'
set title who." slowdown per workload (log scale; above 1 = ".who." slower)\n{/*0.8 ".subtitle."}"
set logscale y 10
set yrange [*<0.5:2<*]
set ylabel who.' time / peer time (W7: peer speed / '.who.' speed)'
set grid ytics
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by -35 left nomirror
set key outside top center horizontal
set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 lc rgb '#000000' front
plot datafile using 2:xtic(1) title 'vs native disk' lc rgb '#4c72b0', \
     ''       using 3 title 'vs kernel overlayfs' lc rgb '#dd8452', \
     ''       using 4 title 'vs fuse-overlayfs' lc rgb '#55a868'
