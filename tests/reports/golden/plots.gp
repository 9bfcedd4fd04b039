# gnuplot script of this report (regenerate the plots: cd into this directory and run `LC_ALL=C.UTF-8 gnuplot plots.gp`; UTF-8 text).
# Speedup vs. AR — /tmp/gpu_check.XkkvGq/twin8b · T=0
$headline_speedup_1 << EOD
"ddtree" 1.73969 1.07861 2.75569 14034728
"jetspec" 1.72768 1.12561 2.45491 2924588
"specblock" 1.51226 0.805961 2.80194 16744206
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'headline_speedup_1.png'
set title 'Speedup vs. AR — /tmp/gpu_check.XkkvGq/twin8b · T=0'
set xlabel 'case (method and the knobs that differ)'
set ylabel 'speedup vs. AR (×, geometric mean over answers)'
set grid ytics
set key outside right top box
set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:2.6]
set yrange [0:3.13817]
set xtics rotate by -30 font ',9'
plot $headline_speedup_1 using 0:2:(0.6):5:xtic(1) with boxes lc rgb variable notitle, \
     $headline_speedup_1 using 0:2:3:4 with yerrorbars lc rgb 'black' pt -1 lw 1.5 title '95% CI', \
     1 with lines dt 2 lw 1.5 lc rgb 'gray30' title 'AR (1.0×)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'headline_speedup_1.svg'
replot
unset output
reset

# Speedup vs. AR — /tmp/gpu_check.XkkvGq/twin8b · T=1
$headline_speedup_2 << EOD
"sps" 0.511226 0.27874 0.955433 9725885
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'headline_speedup_2.png'
set title 'Speedup vs. AR — /tmp/gpu_check.XkkvGq/twin8b · T=1'
set xlabel 'case (method and the knobs that differ)'
set ylabel 'speedup vs. AR (×, geometric mean over answers)'
set grid ytics
set key outside right top box
set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:0.6]
set yrange [0:1.12]
set xtics rotate by -30 font ',9'
plot $headline_speedup_2 using 0:2:(0.6):5:xtic(1) with boxes lc rgb variable notitle, \
     $headline_speedup_2 using 0:2:3:4 with yerrorbars lc rgb 'black' pt -1 lw 1.5 title '95% CI', \
     1 with lines dt 2 lw 1.5 lc rgb 'gray30' title 'AR (1.0×)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'headline_speedup_2.svg'
replot
unset output
reset

# Decode throughput per case — /tmp/gpu_check.XkkvGq/twin8b / stories
$decode_speed_1 << EOD
"ar T=0" 24.1203 2062260
"ddtree T=0" 39.4976 14034728
"jetspec T=0" 54.8979 2924588
"specblock T=0" 35.4613 16744206
"ar T=1" 28.8106 2062260
"sps T=1" 19.2559 9725885
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'decode_speed_1.png'
set title 'Decode throughput per case — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'case (method, knobs, temperature)'
set ylabel 'decode throughput (tokens/s)'
set grid ytics
set key outside right top box
set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:5.6]
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set xtics rotate by 90 right
set bmargin 14
unset key
plot $decode_speed_1 using 0:2:(0.6):3:xtic(1) with boxes lc rgb variable notitle
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'decode_speed_1.svg'
replot
unset output
reset

# Speedup vs. drafting-time share — /tmp/gpu_check.XkkvGq/twin8b / stories
$speedup_vs_draft_1_1 << EOD
6.13691 1.73969
EOD
$speedup_vs_draft_1_2 << EOD
6.55946 1.72768
EOD
$speedup_vs_draft_1_3 << EOD
12.0069 1.51226
EOD
$speedup_vs_draft_1_5 << EOD
42.7611 0.511226
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'speedup_vs_draft_1.png'
set title 'Speedup vs. drafting-time share — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'T_D: drafting time / decode time (%)'
set ylabel 'speedup vs. AR (×, geometric mean over prompts)'
set grid ytics
set key outside right top box
set grid xtics
set offsets 0, 0, graph 0.1, 0
set xrange [0:100]
set yrange [0:*]
plot 1 with lines dt 2 lc rgb 'gray40' title 'AR baseline (1.0×)', \
     $speedup_vs_draft_1_1 using 1:2 with points lc rgb '#d62728' pt 5 ps 2 title 'ddtree T=0', \
     $speedup_vs_draft_1_2 using 1:2 with points lc rgb '#2ca02c' pt 9 ps 2 title 'jetspec T=0', \
     $speedup_vs_draft_1_3 using 1:2 with points lc rgb '#ff7f0e' pt 11 ps 2 title 'specblock T=0', \
     $speedup_vs_draft_1_5 using 1:2 with points lc rgb '#9467bd' pt 13 ps 2 title 'sps T=1'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'speedup_vs_draft_1.svg'
replot
unset output
reset

# Speedup vs. τ — /tmp/gpu_check.XkkvGq/twin8b / stories
$speedup_vs_tau_1_1 << EOD
3 1.73969
EOD
$speedup_vs_tau_1_2 << EOD
3 1.72768
EOD
$speedup_vs_tau_1_3 << EOD
2.35075 1.51226
EOD
$speedup_vs_tau_1_5 << EOD
2.48031 0.511226
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'speedup_vs_tau_1.png'
set title 'Speedup vs. τ — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'τ (tokens per verify step)'
set ylabel 'speedup vs. AR (×)'
set grid ytics
set key outside right top box
set grid
set xrange [1:4]
set yrange [0:*]
plot $speedup_vs_tau_1_1 using 1:2 with points lc rgb '#d62728' pt 5 ps 2 title 'ddtree T=0', \
     $speedup_vs_tau_1_2 using 1:2 with points lc rgb '#2ca02c' pt 9 ps 2 title 'jetspec T=0', \
     $speedup_vs_tau_1_3 using 1:2 with points lc rgb '#ff7f0e' pt 11 ps 2 title 'specblock T=0', \
     $speedup_vs_tau_1_5 using 1:2 with points lc rgb '#9467bd' pt 13 ps 2 title 'sps T=1', \
     x / 1 with lines dt 2 lc rgb 'gray60' title 'step = 1 AR steps', \
     x / 1.5 with lines dt 2 lc rgb 'gray60' title 'step = 1.5 AR steps', \
     x / 2 with lines dt 2 lc rgb 'gray60' title 'step = 2 AR steps', \
     x / 3 with lines dt 2 lc rgb 'gray60' title 'step = 3 AR steps'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'speedup_vs_tau_1.svg'
replot
unset output
reset

# Mean tokens per verify step (τ) — /tmp/gpu_check.XkkvGq/twin8b / stories
$tau_1 << EOD
"ddtree T=0" 3 14034728
"jetspec T=0" 3 2924588
"specblock T=0" 2.35075 16744206
"sps T=1" 2.48031 9725885
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'tau_1.png'
set title 'Mean tokens per verify step (τ) — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'case (method, knobs, temperature)'
set ylabel 'τ (tokens per verify step)'
set grid ytics
set key outside right top box
set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:3.6]
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set xtics rotate by 90 right
set bmargin 14
unset key
plot $tau_1 using 0:2:(0.6):3:xtic(1) with boxes lc rgb variable title 'τ (tokens per verify step)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'tau_1.svg'
replot
unset output
reset

# Per-position acceptance at T=0 — /tmp/gpu_check.XkkvGq/twin8b / stories
$acceptance_1_t0_1 << EOD
1 0.990476
2 0.714286
3 0.266667
4 0.0380952
EOD
$acceptance_1_t0_2 << EOD
1 0.952381
2 0.771429
3 0.238095
4 0.0666667
EOD
$acceptance_1_t0_3 << EOD
1 0.61194
2 0.380597
3 0.171642
4 0.0895522
5 0.0447761
6 0.0298507
7 0.0223881
8 0.00746269
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'acceptance_1_t0.png'
set title 'Per-position acceptance at T=0 — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'draft position i (tokens after the last accepted one)'
set ylabel 'P(position i accepted), all verify steps'
set grid ytics
set key outside right top box
set grid xtics
set xrange [0.5:8.5]
set xtics 1
set yrange [0:1.05]
plot $acceptance_1_t0_1 using 1:2 with linespoints lw 2 lc rgb '#d62728' pt 5 title 'ddtree (n=105)', \
     $acceptance_1_t0_2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' pt 9 title 'jetspec (n=105)', \
     $acceptance_1_t0_3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' pt 11 title 'specblock (n=134)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'acceptance_1_t0.svg'
replot
unset output
reset

# Conditional per-position acceptance r_i at T=0 — /tmp/gpu_check.XkkvGq/twin8b / stories
$acceptance_cond_1_t0_1 << EOD
1 0.990476
2 0.75
3 0.666667
4 0.363636
EOD
$acceptance_cond_1_t0_2 << EOD
1 0.952381
2 0.778846
3 0.462963
4 0.538462
EOD
$acceptance_cond_1_t0_3 << EOD
1 0.845361
2 0.573034
3 0.2875
4 0.181818
5 0.117647
6 0.173913
7 0.214286
8 0.166667
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'acceptance_cond_1_t0.png'
set title 'Conditional per-position acceptance r_i at T=0 — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'draft position i (tokens after the last accepted one)'
set ylabel 'r_i (accepted | drafted to position i)'
set grid ytics
set key outside right top box
set grid xtics
set xrange [0.5:8.5]
set xtics 1
set yrange [0:1.05]
plot $acceptance_cond_1_t0_1 using 1:2 with linespoints lw 2 lc rgb '#d62728' pt 5 title 'ddtree (n=105)', \
     $acceptance_cond_1_t0_2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' pt 9 title 'jetspec (n=105)', \
     $acceptance_cond_1_t0_3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' pt 11 title 'specblock (n=134)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'acceptance_cond_1_t0.svg'
replot
unset output
reset

# Per-position acceptance at T=1 — /tmp/gpu_check.XkkvGq/twin8b / stories
$acceptance_1_t1_5 << EOD
1 0.606299
2 0.401575
3 0.299213
4 0.188976
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'acceptance_1_t1.png'
set title 'Per-position acceptance at T=1 — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'draft position i (tokens after the last accepted one)'
set ylabel 'P(position i accepted), all verify steps'
set grid ytics
set key outside right top box
set grid xtics
set xrange [0.5:4.5]
set xtics 1
set yrange [0:1.05]
plot $acceptance_1_t1_5 using 1:2 with linespoints lw 2 lc rgb '#9467bd' pt 13 title 'sps (n=127)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'acceptance_1_t1.svg'
replot
unset output
reset

# Conditional per-position acceptance r_i at T=1 — /tmp/gpu_check.XkkvGq/twin8b / stories
$acceptance_cond_1_t1_5 << EOD
1 0.606299
2 0.41129
3 0.311475
4 0.201681
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'acceptance_cond_1_t1.png'
set title 'Conditional per-position acceptance r_i at T=1 — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'draft position i (tokens after the last accepted one)'
set ylabel 'r_i (accepted | drafted to position i)'
set grid ytics
set key outside right top box
set grid xtics
set xrange [0.5:4.5]
set xtics 1
set yrange [0:1.05]
plot $acceptance_cond_1_t1_5 using 1:2 with linespoints lw 2 lc rgb '#9467bd' pt 13 title 'sps (n=127)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'acceptance_cond_1_t1.svg'
replot
unset output
reset

# Speedup per prompt category — /tmp/gpu_check.XkkvGq/twin8b / stories
$speedup_per_category_1 << EOD
"category" "ddtree T=0" "jetspec T=0" "specblock T=0" "sps T=1"
"dialogue" 0.98394 1.34772 0.53643 0.622145
"story" 2.00608 1.83835 1.95954 0.486736
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'speedup_per_category_1.png'
set title 'Speedup per prompt category — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'prompt category'
set ylabel 'speedup vs. AR (×)'
set grid ytics
set key outside right top box
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set yrange [0:*]
plot $speedup_per_category_1 using 2:xtic(1) title columnheader(2) lc rgb '#d62728' fs solid 0.85 border -1, \
     '' using 3 title columnheader(3) lc rgb '#2ca02c' fs solid 0.85 border -1, \
     '' using 4 title columnheader(4) lc rgb '#ff7f0e' fs solid 0.85 border -1, \
     '' using 5 title columnheader(5) lc rgb '#9467bd' fs pattern 2 border -1, \
     1 with lines dt 2 lc rgb 'gray40' title 'AR (1.0×)'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'speedup_per_category_1.svg'
replot
unset output
reset

# Per-answer speedup — /tmp/gpu_check.XkkvGq/twin8b / stories
$speedup_per_answer_1 << EOD
0 2.909 14034728
0 0.843957 14034728
0 2.29237 14034728
0 0.98394 14034728
0 2.87767 14034728
1 2.21146 2924588
1 0.813362 2924588
1 2.54831 2924588
1 1.34772 2924588
1 2.49171 2924588
2 2.96237 16744206
2 0.749215 16744206
2 2.17803 16744206
2 0.53643 16744206
2 3.05008 16744206
3 0.466265 9725885
3 0.377698 9725885
3 0.192747 9725885
3 0.622145 9725885
3 1.65351 9725885
EOD
$speedup_per_answer_1_means << EOD
0 1.73969 "ddtree T=0"
1 1.72768 "jetspec T=0"
2 1.51226 "specblock T=0"
3 0.511226 "sps T=1"
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'speedup_per_answer_1.png'
set title 'Per-answer speedup — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'case'
set ylabel 'answer speedup vs. AR (×)'
set grid ytics
set key outside right top box
set xrange [-0.6:3.6]
set yrange [0:*]
set xtics rotate by 90 right
set bmargin 14
unset key
plot $speedup_per_answer_1 using 1:2:3 with points pt 7 ps 0.8 lc rgb variable, \
     $speedup_per_answer_1_means using 1:2:(0.35):xtic(3) with xerrorbars pt 0 lw 3 lc rgb 'black', \
     1 with lines dt 2 lc rgb 'gray40'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'speedup_per_answer_1.svg'
replot
unset output
reset

# Decode time by phase — /tmp/gpu_check.XkkvGq/twin8b / stories
$phase_time_1 << EOD
"#2 ddtree T=0" 6.13691 0 93.8497 0.0131816 0.000187156
"#4 jetspec T=0" 6.55946 0 93.4243 0.0159706 0.000222816
"#3 specblock T=0" 12.0069 0 87.979 0.0139171 0.000148014
"#6 sps T=1" 42.7611 0 57.2315 0.0073204 9.16522e-05
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'phase_time_1.png'
set title 'Decode time by phase — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'case (method, knobs, temperature)'
set ylabel 'share of decode time (%)'
set grid ytics
set key outside right top box
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set yrange [0:105]
set xtics rotate by 90 right font ',9'
set bmargin 14
plot $phase_time_1 using 2:xtic(1) title 'draft', '' using 4 title 'verify', '' using 5 title 'other', '' using 6 title 'untimed'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'phase_time_1.svg'
replot
unset output
reset

# τ vs. temperature — /tmp/gpu_check.XkkvGq/twin8b / stories
$tau_vs_temperature_1_0 << EOD
0 3
EOD
$tau_vs_temperature_1_1 << EOD
0 3
EOD
$tau_vs_temperature_1_2 << EOD
0 2.35075
EOD
$tau_vs_temperature_1_3 << EOD
1 2.48031
EOD
set encoding utf8
set terminal pngcairo size 960,540 noenhanced font 'Sans,11'
set output 'tau_vs_temperature_1.png'
set title 'τ vs. temperature — /tmp/gpu_check.XkkvGq/twin8b / stories'
set xlabel 'sampling temperature T'
set ylabel 'τ (tokens per verify step)'
set grid ytics
set key outside right top box
set grid xtics
set xrange [-0.05:1.05]
set offsets 0, 0, graph 0.1, 0
set yrange [0:*]
plot $tau_vs_temperature_1_0 using 1:2 with linespoints lw 2 ps 1.3 lc rgb '#d62728' pt 5 title 'ddtree', \
     $tau_vs_temperature_1_1 using 1:2 with linespoints lw 2 ps 1.3 lc rgb '#2ca02c' pt 9 title 'jetspec', \
     $tau_vs_temperature_1_2 using 1:2 with linespoints lw 2 ps 1.3 lc rgb '#ff7f0e' pt 11 title 'specblock', \
     $tau_vs_temperature_1_3 using 1:2 with linespoints lw 2 ps 1.3 lc rgb '#9467bd' pt 13 title 'sps'
set terminal svg size 960,540 noenhanced font 'Sans,11' background rgb 'white'
set output 'tau_vs_temperature_1.svg'
replot
unset output
reset

